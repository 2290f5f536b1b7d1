// Process control for the sweep harness: fork/exec into a new group, deadline waits, tree stop and /proc walks.
#include "bench/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace penstock::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(20);

int open_output(const std::string& path) {
    const char* p = path.empty() ? "/dev/null" : path.c_str();
    return ::open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool read_file(const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return true;
}

// Fills pid/ppid/pgid/state/comm from /proc/<pid>/stat; false when the process is gone.
bool read_stat(pid_t pid, ProcInfo* p) {
    std::string s;
    if (!read_file("/proc/" + std::to_string(pid) + "/stat", &s)) return false;
    const size_t open = s.find('(');
    const size_t close = s.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 >= s.size()) return false;
    p->pid = pid;
    p->comm = s.substr(open + 1, close - open - 1);
    std::istringstream rest(s.substr(close + 2));
    long ppid = 0, pgid = 0;
    rest >> p->state >> ppid >> pgid;
    p->ppid = static_cast<pid_t>(ppid);
    p->pgid = static_cast<pid_t>(pgid);
    return static_cast<bool>(rest);
}

// The integer value of the first of `keys` set in a NUL-separated environment block; -1 when none is.
int environ_int(const std::string& block, std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
        const std::string k = std::string(key) + "=";
        size_t pos = 0;
        while (pos < block.size()) {
            const size_t end = std::min(block.find('\0', pos), block.size());
            if (block.compare(pos, k.size(), k) == 0) return std::atoi(block.c_str() + pos + k.size());
            pos = end + 1;
        }
    }
    return -1;
}

void read_details(ProcInfo* p) {
    std::string s;
    if (read_file("/proc/" + std::to_string(p->pid) + "/status", &s)) {
        std::istringstream in(s);
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("VmRSS:", 0) == 0) p->vm_rss_kb = std::atoll(line.c_str() + 6);
            if (line.rfind("VmHWM:", 0) == 0) p->vm_hwm_kb = std::atoll(line.c_str() + 6);
        }
    }
    if (read_file("/proc/" + std::to_string(p->pid) + "/environ", &s)) {
        p->mpi_rank = environ_int(s, {"OMPI_COMM_WORLD_RANK", "PMI_RANK"});
        p->mpi_local_rank = environ_int(s, {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"});
    }
    if (read_file("/proc/" + std::to_string(p->pid) + "/cmdline", &s)) {
        for (char& c : s) {
            if (c == '\0') c = ' ';
        }
        while (!s.empty() && s.back() == ' ') s.pop_back();
        p->cmdline = s.size() > 300 ? s.substr(0, 300) + "..." : s;
    }
}

std::vector<ProcInfo> all_processes() {
    std::vector<ProcInfo> out;
    DIR* d = ::opendir("/proc");
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long pid = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || pid <= 0) continue;
        ProcInfo p;
        if (read_stat(static_cast<pid_t>(pid), &p)) out.push_back(std::move(p));
    }
    ::closedir(d);
    return out;
}

bool alive(pid_t pid) {
    ProcInfo p;
    return read_stat(pid, &p) && p.state != 'Z' && p.state != 'X';
}

// Reaps zombies that are our children (orphans reparented to us as subreaper), except `keep`, whose exit status
// the caller collects.
void reap_zombie_children(pid_t keep) {
    const pid_t self = ::getpid();
    for (const ProcInfo& p : all_processes()) {
        if (p.ppid == self && p.state == 'Z' && p.pid != keep) ::waitpid(p.pid, nullptr, WNOHANG);
    }
}

}  // namespace

Result<pid_t> spawn_process(const SpawnParams& params) {
    if (params.argv.empty()) return invalid_argument("spawn_process: empty argv");
    std::vector<char*> argv;
    for (const std::string& a : params.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        bool replaced = false;
        for (const auto& [k, v] : params.env) replaced = replaced || entry.rfind(k + "=", 0) == 0;
        if (!replaced) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : params.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    const int out_fd = open_output(params.stdout_path);
    const int err_fd = open_output(params.stderr_path);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int exec_pipe[2] = {-1, -1};
    if (out_fd < 0 || err_fd < 0 || null_fd < 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
        const std::string why = std::strerror(errno);
        for (int fd : {out_fd, err_fd, null_fd, exec_pipe[0], exec_pipe[1]}) {
            if (fd >= 0) ::close(fd);
        }
        return internal_error("cannot set up output files for '" + params.argv[0] + "': " + why);
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::signal(SIGPIPE, SIG_DFL);
        ::dup2(null_fd, 0);
        ::dup2(out_fd, 1);
        ::dup2(err_fd, 2);
        if (!params.cwd.empty() && ::chdir(params.cwd.c_str()) != 0) {
            const int err = errno;
            [[maybe_unused]] const ssize_t n = ::write(exec_pipe[1], &err, sizeof(err));
            ::_exit(127);
        }
        ::execvpe(argv[0], argv.data(), envp.data());
        const int err = errno;
        [[maybe_unused]] const ssize_t n = ::write(exec_pipe[1], &err, sizeof(err));
        ::_exit(127);
    }
    const int fork_errno = errno;
    ::close(out_fd);
    ::close(err_fd);
    ::close(null_fd);
    ::close(exec_pipe[1]);
    if (pid < 0) {
        ::close(exec_pipe[0]);
        return internal_error("fork failed: " + std::string(std::strerror(fork_errno)));
    }
    ::setpgid(pid, pid);  // also in the parent, so a signal sent right after this returns reaches the group
    int child_errno = 0;
    ssize_t n = 0;
    do {
        n = ::read(exec_pipe[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    ::close(exec_pipe[0]);
    if (n == static_cast<ssize_t>(sizeof(child_errno))) {
        ::waitpid(pid, nullptr, 0);
        return not_found("cannot run '" + params.argv[0] + "': " + std::strerror(child_errno));
    }
    return pid;
}

int decode_wait_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

std::optional<int> poll_process(pid_t pid) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode_wait_status(status);
    if (r < 0 && errno == ECHILD) return -1;  // already reaped elsewhere
    return std::nullopt;
}

std::optional<int> wait_process(pid_t pid, double timeout_s, const std::atomic<bool>* stop) {
    const Clock::time_point t0 = Clock::now();
    while (true) {
        if (std::optional<int> st = poll_process(pid)) return st;
        if (stop != nullptr && stop->load()) return std::nullopt;
        if (timeout_s >= 0 && seconds_since(t0) >= timeout_s) return std::nullopt;
        std::this_thread::sleep_for(kPollInterval);
    }
}

bool reset_peak_rss(pid_t pid) {
    const int fd = ::open(("/proc/" + std::to_string(pid) + "/clear_refs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = ::write(fd, "5", 1) == 1;
    ::close(fd);
    return ok;
}

std::vector<ProcInfo> process_tree(const std::vector<pid_t>& roots, pid_t pgid) {
    const std::vector<ProcInfo> all = all_processes();
    std::map<pid_t, pid_t> parent;
    for (const ProcInfo& p : all) parent[p.pid] = p.ppid;
    const std::set<pid_t> root_set(roots.begin(), roots.end());
    std::vector<ProcInfo> out;
    for (const ProcInfo& p : all) {
        if (p.state == 'Z' || p.state == 'X') continue;
        bool in = pgid > 0 && p.pgid == pgid;
        pid_t cur = p.pid;
        for (int depth = 0; depth < 128 && !in && cur > 1; ++depth) {
            if (root_set.count(cur) != 0) in = true;
            const auto it = parent.find(cur);
            if (it == parent.end()) break;
            cur = it->second;
        }
        if (!in) continue;
        ProcInfo q = p;
        read_details(&q);
        out.push_back(std::move(q));
    }
    return out;
}

StopOutcome stop_process_tree(pid_t pid, double grace_s) {
    StopOutcome out;
    std::set<pid_t> known;  // descendants seen while the leader lived: they lose their ancestry once it exits
    const auto refresh = [&] {
        for (const ProcInfo& p : process_tree({pid}, pid)) {
            if (p.pid != pid) known.insert(p.pid);
        }
    };
    const auto leftovers = [&] {
        refresh();
        std::vector<pid_t> live;
        for (pid_t p : known) {
            if (alive(p)) live.push_back(p);
        }
        return live;
    };
    refresh();
    std::optional<int> st = poll_process(pid);
    ::kill(-pid, SIGTERM);  // also when the leader is gone but group members remain (ESRCH otherwise)
    const Clock::time_point t0 = Clock::now();
    while (seconds_since(t0) < grace_s) {
        if (!st) st = poll_process(pid);
        reap_zombie_children(st ? 0 : pid);
        if (st && leftovers().empty()) break;
        std::this_thread::sleep_for(kPollInterval);
    }
    if (!st) st = poll_process(pid);
    if (!st) {
        out.killed = true;
        ::kill(-pid, SIGKILL);
        st = wait_process(pid, /*timeout_s=*/10, nullptr);
    }
    for (pid_t p : leftovers()) {
        ::kill(p, SIGKILL);
        ++out.n_leftover_killed;
    }
    const Clock::time_point t1 = Clock::now();
    while (seconds_since(t1) < 5) {
        reap_zombie_children(st ? 0 : pid);
        if (leftovers().empty()) break;
        std::this_thread::sleep_for(kPollInterval);
    }
    out.exit_status = st.value_or(-1);
    return out;
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

std::optional<std::string> capture_output(const std::vector<std::string>& argv, double timeout_s) {
    char path[] = "/tmp/penstock-capture-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) return std::nullopt;
    ::close(fd);
    std::optional<std::string> text;
    Result<pid_t> pid = spawn_process({.argv = argv, .env = {}, .stdout_path = path, .stderr_path = "", .cwd = ""});
    if (pid.ok()) {
        const std::optional<int> st = wait_process(*pid, timeout_s, nullptr);
        if (!st) stop_process_tree(*pid, /*grace_s=*/0);
        std::string s;
        if (st && read_file(path, &s)) text = std::move(s);
    }
    ::unlink(path);
    return text;
}

std::string find_program(const std::string& program) {
    if (program.empty()) return "";
    if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0 ? program : "";
    const char* path_env = std::getenv("PATH");
    std::stringstream ss(path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");
    std::string dir;
    while (std::getline(ss, dir, ':')) {
        if (dir.empty()) dir = ".";
        const std::string full = dir + "/" + program;
        if (::access(full.c_str(), X_OK) == 0) return full;
    }
    return "";
}

std::string shell_quote(const std::string& arg) {
    if (arg.empty()) return "''";
    bool safe = true;
    for (char c : arg) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        std::strchr("_./:=,@%+-", c) != nullptr;
        safe = safe && ok;
    }
    if (safe) return arg;
    std::string out = "'";
    for (char c : arg) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out.push_back(c);
        }
    }
    return out + "'";
}

}  // namespace penstock::bench
