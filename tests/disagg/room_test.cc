// The room state machine (SPEC §5): legal transitions, illegal ones as values, a deadline per non-terminal state.
#include "disagg/room.h"

#include <gtest/gtest.h>

namespace penstock::disagg {
namespace {

using std::chrono::milliseconds;

TEST(RoomTable, WalksTheStatesAndRefusesIllegalMoves) {
    RoomTable t({.bootstrap = milliseconds(10), .waiting = milliseconds(20), .transfer = milliseconds(30)});
    const TimePoint t0{};
    ASSERT_TRUE(t.open(7, t0).ok());
    EXPECT_EQ(t.open(7, t0).code(), StatusCode::kInvalidArgument) << "a room id is used once";
    EXPECT_EQ(t.find(7)->state, RoomState::kBootstrapping);
    EXPECT_EQ(t.find(7)->deadline, t0 + milliseconds(10));
    EXPECT_EQ(t.start_transfer(7, t0).code(), StatusCode::kFailedPrecondition) << "not waiting yet";
    EXPECT_EQ(t.succeed(7, t0).code(), StatusCode::kFailedPrecondition);
    ASSERT_TRUE(t.bootstrapped(7, t0 + milliseconds(5)).ok());
    EXPECT_EQ(t.find(7)->deadline, t0 + milliseconds(25)) << "the waiting deadline counts from entering the state";
    ASSERT_TRUE(t.start_transfer(7, t0 + milliseconds(6)).ok());
    EXPECT_EQ(t.find(7)->deadline, t0 + milliseconds(36));
    EXPECT_EQ(t.erase(7).code(), StatusCode::kFailedPrecondition) << "a live room is not erased";
    ASSERT_TRUE(t.succeed(7, t0 + milliseconds(7)).ok());
    EXPECT_EQ(t.find(7)->state, RoomState::kSuccess);
    EXPECT_EQ(t.fail(7, "late").code(), StatusCode::kFailedPrecondition) << "a terminal room stays as it is";
    EXPECT_TRUE(t.expire(t0 + milliseconds(1000)).empty());
    EXPECT_EQ(t.n_live(), 0u);
    ASSERT_TRUE(t.erase(7).ok());
    EXPECT_EQ(t.find(7), nullptr);
    EXPECT_EQ(t.bootstrapped(7, t0).code(), StatusCode::kNotFound);
    EXPECT_EQ(room_state_name(RoomState::kWaitingForInput), "WaitingForInput");
}

TEST(RoomTable, EveryNonTerminalStateHasADeadline) {
    RoomTable t({.bootstrap = milliseconds(10), .waiting = milliseconds(20), .transfer = milliseconds(30)});
    const TimePoint t0{};
    for (uint64_t id : {1, 2, 3, 4}) ASSERT_TRUE(t.open(id, t0).ok());
    ASSERT_TRUE(t.bootstrapped(2, t0).ok());
    ASSERT_TRUE(t.bootstrapped(3, t0).ok());
    ASSERT_TRUE(t.start_transfer(3, t0).ok());
    ASSERT_TRUE(t.fail(4, "aborted by the client").ok());
    EXPECT_EQ(t.find(4)->failed_in, RoomState::kBootstrapping);
    EXPECT_EQ(t.expire(t0 + milliseconds(9)), std::vector<uint64_t>{});
    EXPECT_EQ(t.expire(t0 + milliseconds(10)), std::vector<uint64_t>{1});
    EXPECT_EQ(t.find(1)->failure, "deadline passed in Bootstrapping");
    EXPECT_EQ(t.expire(t0 + milliseconds(25)), std::vector<uint64_t>{2});
    EXPECT_EQ(t.find(2)->failed_in, RoomState::kWaitingForInput);
    EXPECT_EQ(t.expire(t0 + milliseconds(30)), std::vector<uint64_t>{3});
    EXPECT_EQ(t.find(3)->failed_in, RoomState::kTransferring);
    EXPECT_EQ(t.n_live(), 0u);
    EXPECT_EQ(t.size(), 4u);
    EXPECT_FALSE(validate(RoomTimeouts{.bootstrap = milliseconds(0)}).ok());
    EXPECT_TRUE(validate(RoomTimeouts{}).ok());
}

}  // namespace
}  // namespace penstock::disagg
