// Child processes for the sweep harness (POSIX/Linux): spawn in a new process group with stdout/stderr redirected
// to files, wait with a deadline that an external stop flag can cut short, stop a whole process tree (SIGTERM to the
// group, grace period, SIGKILL to the group and every descendant), and /proc snapshots of a tree's memory.
// Thread-compatible; meant to be driven from one thread. Linux-only (/proc, prctl).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace penstock::bench {

struct SpawnParams {
    std::vector<std::string> argv;                         // argv[0] is looked up in PATH when it has no '/'
    std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) the inherited environment
    std::string stdout_path;                               // "" = /dev/null; files are truncated
    std::string stderr_path;                               // "" = /dev/null
    std::string cwd;                                       // "" = inherit
};

// Starts argv in a new process group (pgid = pid) with stdin from /dev/null. The child also gets SIGTERM when the
// spawning thread dies (PR_SET_PDEATHSIG), so a killed sweep does not orphan servers. An exec failure (no such
// program) is reported here, not as a child exit code.
[[nodiscard]] Result<pid_t> spawn_process(const SpawnParams& params);

// Exit status as a shell reports it: the exit code, or 128 + signal number.
int decode_wait_status(int status);

// Waits for child `pid` up to timeout_s (< 0: forever). Returns the decoded exit status, or nullopt when the deadline
// passed or *stop became true first (the child keeps running).
std::optional<int> wait_process(pid_t pid, double timeout_s, const std::atomic<bool>* stop);

// Non-blocking: the decoded exit status if the child has exited (and reaps it), else nullopt.
std::optional<int> poll_process(pid_t pid);

struct StopOutcome {
    int exit_status = -1;      // the child's decoded exit status (-1 if it could not be reaped)
    bool killed = false;       // SIGKILL was needed (after the grace period)
    int n_leftover_killed = 0;  // descendants still alive after the leader exited, killed with SIGKILL
};

// Stops child `pid` (a group leader from spawn_process) and everything it started: SIGTERM to the group, wait up to
// grace_s for the leader and its descendants to exit, then SIGKILL to the group and to every remaining descendant
// (including ones that changed process group), and reap. Safe to call on an already-exited, unreaped child.
StopOutcome stop_process_tree(pid_t pid, double grace_s);

struct ProcInfo {
    pid_t pid = 0, ppid = 0, pgid = 0;
    char state = '?';
    std::string comm;
    std::string cmdline;  // NUL separators shown as spaces, cut at 300 chars
    int64_t vm_rss_kb = -1;
    int64_t vm_hwm_kb = -1;   // peak RSS since start or since the last reset_peak_rss()
    int mpi_rank = -1;        // OMPI_COMM_WORLD_RANK (or PMI_RANK) from /proc/<pid>/environ; -1 when absent
    int mpi_local_rank = -1;  // OMPI_COMM_WORLD_LOCAL_RANK (or MPI_LOCALRANKID); -1 when absent
};

// Resets the process's VmHWM to its current RSS (writes "5" to /proc/<pid>/clear_refs, Linux >= 4.0), so that the
// next VmHWM is the peak since now. False when the file cannot be written (another user's process, old kernel).
bool reset_peak_rss(pid_t pid);

// Every live (non-zombie) process in /proc that is in process group `pgid` (<= 0: none) or descends from one of
// `roots` (the roots themselves included). Sorted by pid.
std::vector<ProcInfo> process_tree(const std::vector<pid_t>& roots, pid_t pgid);

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so server ranks whose
// launcher died stay visible as descendants and can be killed. Process-wide; call once at sweep start.
void become_subreaper();

// Runs argv to completion with a deadline, capturing stdout (stderr discarded). nullopt if it cannot be spawned or
// runs past timeout_s (then it is killed).
std::optional<std::string> capture_output(const std::vector<std::string>& argv, double timeout_s);

// The full path of `program` found in PATH (or itself when it contains '/' and is executable); "" when absent.
std::string find_program(const std::string& program);

// Quotes one argument for a POSIX shell ('...' when needed), for command.txt files.
std::string shell_quote(const std::string& arg);

}  // namespace penstock::bench
