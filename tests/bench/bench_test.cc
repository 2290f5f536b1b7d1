// penstock bench helpers: percentiles (numpy's linear interpolation) and --base-url parsing.
#include "bench/bench.h"

#include <gtest/gtest.h>

#include "bench/client.h"

namespace penstock::bench {
namespace {

TEST(Bench, PercentilesInterpolateLikeNumpy) {
    const Percentiles p = percentiles({4, 1, 3, 2, 5});
    EXPECT_DOUBLE_EQ(p.mean, 3.0);
    EXPECT_DOUBLE_EQ(p.p50, 3.0);
    EXPECT_DOUBLE_EQ(p.p95, 4.8);  // numpy.percentile([1..5], 95)
    EXPECT_DOUBLE_EQ(p.p99, 4.96);
    EXPECT_DOUBLE_EQ(p.max, 5.0);
    const Percentiles one = percentiles({7});
    EXPECT_DOUBLE_EQ(one.p99, 7.0);
    const Percentiles none = percentiles({});
    EXPECT_DOUBLE_EQ(none.mean, 0.0);
}

TEST(Bench, ParsesBaseUrl) {
    Endpoint ep;
    std::string err;
    ASSERT_TRUE(parse_base_url("http://127.0.0.1:30001", &ep, &err));
    EXPECT_EQ(ep.host, "127.0.0.1");
    EXPECT_EQ(ep.port, 30001);
    ASSERT_TRUE(parse_base_url("http://localhost:8080/v1", &ep, &err));
    EXPECT_EQ(ep.port, 8080);
    EXPECT_FALSE(parse_base_url("https://x:1", &ep, &err));
    EXPECT_FALSE(parse_base_url("http://x:99999", &ep, &err));
    EXPECT_FALSE(parse_base_url("http://x:abc", &ep, &err));
}

}  // namespace
}  // namespace penstock::bench
