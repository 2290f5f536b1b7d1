// The engine's prefill/decode disaggregation (engine.h DisaggOptions; docs/design/disagg.md): the decode end's rooms,
// lazy claims and bootstrap answers, the prefill end's transfer queues, and the held pages of both.
#include <algorithm>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/logging.h"
#include "disagg/stage_sender.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace penstock::engine {

std::string_view disagg_mode_name(DisaggOptions::Mode m) {
    switch (m) {
        case DisaggOptions::Mode::kNone:
            return "null";
        case DisaggOptions::Mode::kPrefill:
            return "prefill";
        case DisaggOptions::Mode::kDecode:
            return "decode";
    }
    return "?";
}

Result<disagg::KvLayout> disagg_kv_layout(runtime::ModelRunner& runner, const std::string& what) {
    disagg::KvLayout layout;
    // KDA's per-request state goes too, one "page" per state slot: its storage is reserved whole now so that the
    // registered addresses stay valid.
    if (runner.cache().has_request_state()) runner.cache().reserve_state_storage();
    for (const bool per_slot : {false, true}) {
        for (const kv_cache::PagedBuffer& b :
             per_slot ? runner.cache().state_buffers() : runner.cache().paged_buffers()) {
            if (b.on_device) {
                return unimplemented(what +
                                     "the KV cache is on the GPU; this build's transfer engine moves host memory only "
                                     "(UCX's CUDA transports are not wired yet)");
            }
            layout.buffers.push_back({.key = disagg::kv_key(b.layer, static_cast<uint8_t>(b.kind)),
                                      .base = b.base,
                                      .page_bytes = b.page_bytes,
                                      .page_stride = b.page_stride,
                                      .n_pages = b.n_pages,
                                      .per_slot = per_slot});
        }
    }
    if (layout.buffers.empty()) return unimplemented(what + "this model's cache lists no paged KV buffers");
    return layout;
}

std::vector<std::vector<uint8_t>> Engine::transfer_queue_addresses() const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& q : xfer_queues_) out.push_back(q->engine->address());
    return out;
}

Result<std::vector<uint8_t>> Engine::destination(uint64_t room, std::optional<bool> peer_lazy) const {
    if (options_.disagg.mode != DisaggOptions::Mode::kDecode) {
        return failed_precondition("this server is not the decode end of a disaggregated deployment");
    }
    const bool lazy = options_.disagg.lazy_allocation;
    std::lock_guard<std::mutex> lock(dest_mu_);
    if (peer_lazy && *peer_lazy != lazy) {
        const std::string why = std::string("settings mismatch: --disaggregation-lazy-allocation is ") +
                                (lazy ? "on" : "off") + " at the decode server and " + (*peer_lazy ? "on" : "off") +
                                " at the prefill server";
        mismatched_rooms_.emplace(room, why);
        return failed_precondition(why);
    }
    auto it = destinations_.find(room);
    if (it != destinations_.end()) {
        fetched_rooms_.insert(room);  // the engine thread moves the room to WaitingForInput
        return it->second;
    }
    if (claimed_rooms_.contains(room)) wanted_rooms_.insert(room);  // the engine thread reserves the pages next
    return not_found("room " + std::to_string(room) + " has no pages here (yet)");
}

Status Engine::expect_room(int64_t id, uint64_t room) {
    if (room_request_.contains(room)) return invalid_argument("bootstrap_room " + std::to_string(room) + " is in use");
    const kv_cache::PageTable& table = sched_->page_table(id);
    const scheduler::Request* r = sched_->find(id);
    int32_t slot = -1;
    if (runner_->cache().has_request_state()) {  // KDA: the state slot the prefill end's state goes into
        PENSTOCK_RETURN_IF_ERROR(runner_->cache().admit(id));
        slot = runner_->cache().state_slot(id).value_or(-1);
    }
    PENSTOCK_ASSIGN_OR_RETURN(disagg::KvDestination d,
                              receiver_->expect(room, table.pages, slot, r->prompt_len(), disagg::Clock::now(),
                                                /*bootstrapped=*/options_.disagg.lazy_allocation));
    room_request_[room] = id;
    std::lock_guard<std::mutex> lock(dest_mu_);
    destinations_[room] = d.encode();
    return ok_status();
}

void Engine::release_held_kv(int64_t id) {
    if (sched_->release_held(id).ok()) runner_->cache().release(id);
}

bool Engine::disagg_busy() const {
    return (receiver_ != nullptr && receiver_->rooms().size() > 0) || xfer_outstanding_ > 0 || !claims_.empty();
}

void Engine::finish_unscheduled(int64_t id, RequestOutput out) {
    auto it = live_.find(id);
    PENSTOCK_CHECK(it != live_.end()) << "request " << id << " has no engine state";
    Live& l = *it->second;
    out.prompt_tokens = l.prompt_len;
    out.e2e_s = seconds(Clock::now() - l.arrival);
    {
        std::lock_guard<std::mutex> lock(metrics_mu_);
        ++metrics_.finished_by_reason[out.finish_reason];
    }
    l.handle->push(std::move(out));
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!l.rid.empty()) rids_.erase(l.rid);
    }
    live_.erase(it);
    --n_live_;
}

void Engine::serve_claims() {
    if (receiver_ == nullptr) return;
    std::unordered_set<uint64_t> wanted;
    std::unordered_map<uint64_t, std::string> mismatched;
    {
        std::lock_guard<std::mutex> lock(dest_mu_);
        wanted = wanted_rooms_;
        mismatched.swap(mismatched_rooms_);
    }
    // A prefill end with the other allocation setting will not send: a room with pages fails at once (T12).
    for (const auto& [room, why] : mismatched) {
        auto r = room_request_.find(room);
        if (r == room_request_.end()) continue;
        const int64_t id = r->second;
        if (sched_->awaiting_kv(id)) {
            live_.at(id)->error = failed_precondition("bootstrap_room " + std::to_string(room) + ": " + why);
            count_abort_phase(*sched_->find(id));
            (void)sched_->abort(id);
        }
        release_held_kv(id);  // nothing will write them
        (void)receiver_->rooms().fail(room, why);
        (void)receiver_->rooms().erase(room);
        room_request_.erase(r);
        std::lock_guard<std::mutex> lock(dest_mu_);
        destinations_.erase(room);
        std::lock_guard<std::mutex> mlock(metrics_mu_);
        ++metrics_.kv_transfers["receive_failed"];
    }
    if (claims_.empty()) return;
    const disagg::TimePoint now = disagg::Clock::now();
    for (auto it = claims_.begin(); it != claims_.end();) {
        const uint64_t room = it->first;
        const int64_t id = it->second.id;
        Status end = ok_status();
        if (auto m = mismatched.find(room); m != mismatched.end()) {
            end = failed_precondition("bootstrap_room " + std::to_string(room) + ": " + m->second);
        } else if (wanted.contains(room)) {
            // The prefill end asked: reserve the pages now (or next time round when the pool is full).
            scheduler::NewRequest copy = it->second.request;
            const Status st = sched_->add_prefilled_request(std::move(copy));
            if (st.ok()) {
                if (const Status e = expect_room(id, room); !e.ok()) {
                    live_.at(id)->error = e;
                    (void)sched_->abort(id);
                    release_held_kv(id);
                }
            } else if (st.code() != StatusCode::kResourceExhausted) {
                end = st;
            } else if (it->second.deadline <= now) {
                end = Status(StatusCode::kUnavailable, "bootstrap_room " + std::to_string(room) +
                                                           ": no KV pages free before the waiting deadline");
            }
            if (st.ok()) {
                std::lock_guard<std::mutex> lock(dest_mu_);
                claimed_rooms_.erase(room);
                wanted_rooms_.erase(room);
                it = claims_.erase(it);
                continue;
            }
        } else if (it->second.deadline <= now) {
            end = Status(StatusCode::kUnavailable, "bootstrap_room " + std::to_string(room) +
                                                       ": the prefill end did not ask for the room before the "
                                                       "waiting deadline");
        }
        if (end.ok()) {
            ++it;
            continue;
        }
        {
            std::lock_guard<std::mutex> lock(dest_mu_);
            claimed_rooms_.erase(room);
            wanted_rooms_.erase(room);
        }
        {
            std::lock_guard<std::mutex> lock(metrics_mu_);
            ++metrics_.kv_transfers["receive_failed"];
        }
        it = claims_.erase(it);
        finish_unscheduled(id, finished_output("error", end));
    }
}

void Engine::poll_rooms() {
    if (receiver_ == nullptr) return;
    const disagg::TimePoint now = disagg::Clock::now();
    std::erase_if(quarantine_, [&](const std::pair<int64_t, disagg::TimePoint>& q) {
        if (q.second > now) return false;
        release_held_kv(q.first);
        return true;
    });
    if (receiver_->rooms().size() == 0) return;
    // Destinations fetched since the last round: those rooms now wait for their KV (before the aux records are read,
    // so a room's record never arrives while it still looks un-bootstrapped).
    std::unordered_set<uint64_t> fetched;
    {
        std::lock_guard<std::mutex> lock(dest_mu_);
        fetched.swap(fetched_rooms_);
    }
    for (uint64_t room : fetched) {
        const disagg::Room* r = receiver_->rooms().find(room);
        if (r != nullptr && r->state == disagg::RoomState::kBootstrapping) {
            (void)receiver_->rooms().bootstrapped(room, now);
        }
    }
    const std::vector<uint64_t> ended = receiver_->poll(now);
    {
        // Aux records for no waiting room (late, stray or hostile) and malformed messages; normally 0.
        std::lock_guard<std::mutex> lock(metrics_mu_);
        metrics_.kv_transfers["record_dropped"] = receiver_->n_dropped();
    }
    for (uint64_t room : ended) {
        const disagg::Room* info = receiver_->rooms().find(room);
        const int64_t id = room_request_.at(room);
        {
            std::lock_guard<std::mutex> lock(dest_mu_);
            destinations_.erase(room);
        }
        const bool ok = info->state == disagg::RoomState::kSuccess;
        {
            std::lock_guard<std::mutex> lock(metrics_mu_);
            ++metrics_.kv_transfers[ok ? "received" : "receive_failed"];
        }
        if (sched_->awaiting_kv(id)) {
            if (ok) {
                const int32_t first = info->first_token;
                const Result<bool> done = sched_->complete_transfer(id, first);
                PENSTOCK_CHECK(done.ok()) << done.status().to_string();
                on_token(id, first, nullptr);  // its log-probability stayed at the prefill server
            } else {
                Live& l = *live_.at(id);
                l.error = Status(StatusCode::kUnavailable, "the KV transfer for bootstrap_room " +
                                                               std::to_string(room) + " failed: " + info->failure);
                count_abort_phase(*sched_->find(id));
                (void)sched_->abort(id);
            }
        }
        // A request that ended while its KV was on the way holds its pages until now. After a failed room a late
        // writer is still possible until the prefill end's transfer deadline: its pages wait that long.
        if (ok) {
            release_held_kv(id);
        } else if (sched_->held_pages(id).ok()) {
            quarantine_.emplace_back(id, now + options_.disagg.timeouts.transfer);
        }
        room_request_.erase(room);
        (void)receiver_->rooms().erase(room);
    }
}

void Engine::queue_job(TransferJob job) {
    {
        std::lock_guard<std::mutex> lock(xfer_mu_);
        xfer_queues_[disagg::transfer_queue_of(job.room, xfer_queues_.size())]->jobs.push_back(std::move(job));
    }
    xfer_cv_.notify_all();
}

void Engine::queue_transfer(int64_t id, uint64_t room, int32_t first_token) {
    const Result<std::vector<int32_t>> pages = sched_->held_pages(id);
    if (!pages.ok()) return;
    ++xfer_outstanding_;
    queue_job({.kind = TransferJob::Kind::kSend,
               .id = id,
               .room = room,
               .pages = *pages,
               .slot = runner_->cache().state_slot(id).value_or(-1),
               .first_token = first_token});
}

void Engine::dispatch_stage_sends() {
    std::vector<parallel::StageCommand> commands;
    {
        std::lock_guard<std::mutex> lock(xfer_mu_);
        commands.swap(xfer_dispatch_);
    }
    if (commands.empty()) return;
    const Status st = executor_->send_stage_commands(commands);
    PENSTOCK_CHECK(st.ok()) << "handing " << commands.size()
                            << " KV send(s) to the other pipeline stages failed: " << st.to_string();
}

void Engine::collect_transfers() {
    if (xfer_outstanding_ == 0) return;
    dispatch_stage_sends();
    std::vector<std::pair<int64_t, Status>> done;
    {
        std::lock_guard<std::mutex> lock(xfer_mu_);
        done.swap(xfer_done_);
    }
    for (const auto& [id, st] : done) {
        release_held_kv(id);
        if (options_.disagg.pipeline_stages > 1) {
            // The other stages kept the request's pages for their own sends, which are over (or past deadline).
            const int64_t ids[] = {id};
            const Status freed = executor_->release(ids);
            PENSTOCK_CHECK(freed.ok()) << "freeing request " << id
                                       << " on the other stages failed: " << freed.to_string();
        }
        --xfer_outstanding_;
        if (!st.ok()) PENSTOCK_LOG_WARN("KV transfer of request {} failed: {}", id, st.to_string());
        std::lock_guard<std::mutex> lock(metrics_mu_);
        ++metrics_.kv_transfers[st.ok() ? "sent" : "send_failed"];
    }
}

Status Engine::send_staged(TransferQueue& q, const TransferJob& job, const disagg::KvDestination& dst) {
    const DisaggOptions& o = options_.disagg;
    if (dst.layout_fingerprint != deployment_fingerprint_) {
        return failed_precondition("KV layout mismatch between the prefill stages (" +
                                   std::to_string(deployment_buffers_) + " buffers) and decode (" +
                                   std::to_string(dst.regions.size()) +
                                   " buffers, or other page sizes): the two servers must run the same model and KV "
                                   "formats");
    }
    const disagg::TimePoint deadline = disagg::Clock::now() + o.timeouts.transfer;
    {
        std::lock_guard<std::mutex> lock(xfer_mu_);
        if (!dispatch_open_) return Status(StatusCode::kUnavailable, "the server is shutting down");
        xfer_dispatch_.push_back(
            {.request_id = job.id,
             .room = job.room,
             .timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeouts.transfer).count(),
             .payload = dst.encode()});
    }
    cv_.notify_all();
    // This stage's pages meanwhile.
    Status st = q.sender->put_pages(dst, job.pages, job.slot, deadline);
    // Every other stage reports (done, or why not) before the room ends either way: only then may their pages be
    // freed and the aux record say the room's KV is complete. A stage that never reports fails the room a little
    // after the transfer deadline (its own send is bounded by the same deadline, counted from a later start).
    const size_t others = static_cast<size_t>(o.pipeline_stages - 1);
    std::vector<std::optional<Status>>& got = q.reports[job.room];
    got.resize(others);
    const disagg::TimePoint give_up = deadline + std::chrono::seconds(2);
    for (;;) {
        for (const std::vector<uint8_t>& m : q.engine->poll_messages()) {
            const Result<disagg::StageReport> r = disagg::StageReport::decode(m);
            if (!r.ok() || r->stage < 1 || r->stage > others) {
                PENSTOCK_LOG_WARN("dropped a malformed stage report: {}", r.status().to_string());
                continue;
            }
            // Reports for rooms this queue is not sending are stale (a room that gave up): dropped.
            auto room = q.reports.find(r->room);
            if (room == q.reports.end()) continue;
            room->second[r->stage - 1] = Status(r->code, "stage " + std::to_string(r->stage) + ": " + r->message);
        }
        if (std::all_of(got.begin(), got.end(), [](const std::optional<Status>& x) { return x.has_value(); })) break;
        if (disagg::Clock::now() >= give_up) {
            for (size_t i = 0; i < others; ++i) {
                if (!got[i] && st.ok()) {
                    st = Status(StatusCode::kDeadlineExceeded,
                                "pipeline stage " + std::to_string(i + 1) + " did not report its KV send");
                }
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    for (const std::optional<Status>& r : got) {
        if (st.ok() && r && !r->ok()) st = *r;
    }
    q.reports.erase(job.room);
    if (!st.ok()) return st;
    return q.sender->send_aux(dst, job.first_token, deployment_fingerprint_, deadline);
}

void Engine::transfer_loop(size_t queue) {
    TransferQueue& q = *xfer_queues_[queue];
    const DisaggOptions& o = options_.disagg;
    disagg::RoomTable& rooms = *q.rooms;
    // The room's destination from the decode end's bootstrap; the room ends up WaitingForInput, or Failed.
    const auto resolve = [&](uint64_t room) {
        if (!rooms.open(room, disagg::Clock::now()).ok()) return;
        Result<disagg::KvDestination> dst = o.resolve_destination(room, Clock::now() + o.timeouts.bootstrap);
        if (dst.ok() && dst->room != room) dst = invalid_argument("the bootstrap answered for another room");
        if (!dst.ok()) {
            (void)rooms.fail(room, dst.status().message());
            return;
        }
        q.destinations[room] = std::move(*dst);
        (void)rooms.bootstrapped(room, disagg::Clock::now());
    };
    for (;;) {
        TransferJob job;
        {
            std::unique_lock<std::mutex> lock(xfer_mu_);
            xfer_cv_.wait(lock, [&] { return xfer_stopping_ || !q.jobs.empty(); });
            if (q.jobs.empty()) return;
            job = std::move(q.jobs.front());
            q.jobs.pop_front();
        }
        rooms.expire(disagg::Clock::now());
        if (job.kind == TransferJob::Kind::kResolve) {
            resolve(job.room);
            continue;
        }
        if (job.kind == TransferJob::Kind::kSend) {
            if (rooms.find(job.room) == nullptr) resolve(job.room);  // lazy allocation: the bootstrap happens now
            const disagg::Room* r = rooms.find(job.room);
            Status st = ok_status();
            if (r == nullptr || r->state != disagg::RoomState::kWaitingForInput) {
                st = Status(StatusCode::kUnavailable, "bootstrap_room " + std::to_string(job.room) + ": " +
                                                          (r != nullptr ? r->failure : "not open"));
            } else {
                (void)rooms.start_transfer(job.room, disagg::Clock::now());
                st = o.pipeline_stages > 1
                         ? send_staged(q, job, q.destinations.at(job.room))
                         : q.sender->send(q.destinations.at(job.room), job.pages, job.slot, job.first_token,
                                          disagg::Clock::now() + o.timeouts.transfer);
                if (st.ok()) {
                    (void)rooms.succeed(job.room, disagg::Clock::now());
                } else {
                    (void)rooms.fail(job.room, st.message());
                }
            }
            {
                std::lock_guard<std::mutex> lock(xfer_mu_);
                xfer_done_.emplace_back(job.id, std::move(st));
            }
            cv_.notify_all();
        }
        // kSend and kForget end the room here.
        if (const disagg::Room* r = rooms.find(job.room); r != nullptr && !disagg::is_terminal(r->state)) {
            (void)rooms.fail(job.room, "the request ended without a first token");
        }
        (void)rooms.erase(job.room);
        q.destinations.erase(job.room);
    }
}

}  // namespace penstock::engine
