// The device-side bf16 grouped GEMM kernels (kernels/cuda/grouped_gemm.h, issue #7: kTma, kTmaCluster, kTmaK32,
// kWsCpAsync, kCpAsync; one parameterised test each)
// against the CPU reference (ref::grouped_gemm) with the gemm tests' bf16 tolerances: empty groups, 1-row groups,
// rows not a multiple of the 128-row tile, n not a multiple of the 256-column tile (and n <= 128: one weight half),
// k not a multiple of 64, tile counts odd and even (the cluster kernel's dummy tile), n_groups 1 / 7 / 256 / 896, the
// MoE shapes' n / k (DeepSeek-V3 7168 -> 4096, 2048 -> 7168; Kimi K3 3584 -> 6144, 3072 -> 3584) with few groups,
// bf16 and f32 out; rows past offsets[n_groups] keep the poison; the default dispatch captured in a CUDA graph (no
// host sync). Calls the kernels do not take (k % 8 != 0, n % 8 != 0) report why and run on the cuBLASLt path under
// kAuto. Each case prints its max abs / rel error per kernel. Skips without a GPU (CudaTest) or an sm_90 device.
#include "kernels/cuda/grouped_gemm.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_kda.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

class GroupedGemmDeviceTest : public CudaTest {};

struct Case {
    const char* name;
    int64_t n_rows, n, k;
    std::vector<int32_t> sizes;  // rows per group; sum <= n_rows
    DType out_dt = DType::kBF16;
    bool graph = false;
};

const char* kernel_name(cuda::GroupedGemmVariant v) {
    switch (v) {
        case cuda::GroupedGemmVariant::kAuto:
            return "auto";
        case cuda::GroupedGemmVariant::kCublasLt:
            return "cublaslt";
        case cuda::GroupedGemmVariant::kDevice:
            return "device";
        case cuda::GroupedGemmVariant::kTma:
            return "tma";
        case cuda::GroupedGemmVariant::kTmaCluster:
            return "tma_cluster";
        case cuda::GroupedGemmVariant::kTmaK32:
            return "tma_k32";
        case cuda::GroupedGemmVariant::kWsCpAsync:
            return "ws_cp_async";
        case cuda::GroupedGemmVariant::kTmaDyn:
            return "tma_dyn";
        case cuda::GroupedGemmVariant::kTmaDynCluster:
            return "tma_dyn_cluster";
        case cuda::GroupedGemmVariant::kCpAsync:
            return "cp_async";
    }
    return "?";
}

// Compares the used rows of `out` with the reference in out.hv and checks that rows past `used` kept the poison.
void check_out(const Case& c, const char* kernel, const Pair& out, int64_t used, int64_t n_groups,
               const cuda::Stream& stream) {
    SCOPED_TRACE(kernel);
    const Readback all = read_pair(out, stream, false);
    const std::vector<float> expect = read_f32(out.hv);
    double max_abs = 0.0, max_rel = 0.0, max_ref = 0.0;
    for (int64_t i = 0; i < used * c.n; ++i) {
        const double e = expect[static_cast<size_t>(i)];
        const double d = std::fabs(static_cast<double>(all.values[static_cast<size_t>(i)]) - e);
        max_abs = std::max(max_abs, std::isnan(d) ? INFINITY : d);
        max_rel = std::max(max_rel, d / std::max(1.0, std::fabs(e)));
        max_ref = std::max(max_ref, std::fabs(e));
    }
    std::printf(
        "[grouped_gemm %-11s] %-28s rows %6lld used %6lld n %5lld k %5lld groups %4lld out %s: "
        "max|err| %.3g, max rel %.3g (max|ref| %.3g)\n",
        kernel, c.name, static_cast<long long>(c.n_rows), static_cast<long long>(used), static_cast<long long>(c.n),
        static_cast<long long>(c.k), static_cast<long long>(n_groups), c.out_dt == DType::kF32 ? "f32" : "bf16",
        max_abs, max_rel, max_ref);
    if (used > 0) {
        Pair head = out;
        head.hv = out.hv.slice(0, 0, used);
        head.dv = out.dv.slice(0, 0, used);
        const Tolerance tol = c.out_dt == DType::kF32 ? kF32Gemm : kBF16Tol;
        expect_pair_close(head, head.hv, tol, stream, false);
    }
    int64_t written_tail = 0;
    for (int64_t i = used * c.n; i < c.n_rows * c.n; ++i)
        written_tail += !std::isnan(all.values[static_cast<size_t>(i)]);
    EXPECT_EQ(written_tail, 0) << "rows past offsets[n_groups] were written";
}

// One reference run, then `kernel` (graph cases: the default dispatch under capture).
void run_case(const Case& c, cuda::GroupedGemmVariant kernel, uint32_t seed, cuda::CudaCachingAllocator& alloc,
              const cuda::Stream& stream, void* raw) {
    SCOPED_TRACE(::testing::Message() << c.name << ": rows=" << c.n_rows << " n=" << c.n << " k=" << c.k
                                      << " groups=" << c.sizes.size() << " out=" << dtype_name(c.out_dt));
    std::mt19937 rng(seed);
    const auto n_groups = static_cast<int64_t>(c.sizes.size());
    std::vector<int32_t> off(1, 0);
    for (int32_t s : c.sizes) off.push_back(off.back() + s);
    ASSERT_LE(off.back(), c.n_rows);
    const Pair a = random_pair(rng, {c.n_rows, c.k}, DType::kBF16, false, alloc, stream);
    const Pair b = random_pair(rng, {n_groups, c.n, c.k}, DType::kBF16, false, alloc, stream);
    Pair out = poisoned_pair({c.n_rows, c.n}, c.out_dt, false, alloc, stream);
    const Tensor off_dev = dev_i32(off, alloc, stream);
    const Tensor off_host = i32_tensor(off);
    const kernels::GroupedGemmParams p{.out = out.dv, .a = a.dv, .b = b.dv, .offsets = off_dev};
    ASSERT_EQ(cuda::grouped_gemm_device_unsupported(p), nullptr);
    ref::grouped_gemm({.out = out.hv, .a = a.hv, .b = b.hv, .offsets = off_host}, nullptr);
    if (c.graph) {
        const auto s = static_cast<cudaStream_t>(raw);
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        cuda::grouped_gemm(p, raw);  // the default dispatch: must not sync while capturing
        ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        (void)cudaGraphExecDestroy(exec);
        (void)cudaGraphDestroy(graph);
        check_out(c, "auto (graph)", out, off.back(), n_groups, stream);
        return;
    }
    cuda::grouped_gemm_variant(p, kernel, raw);
    check_out(c, kernel_name(kernel), out, off.back(), n_groups, stream);
}

bool is_sm90() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major == 9;
}

std::vector<Case> all_cases() {
    std::mt19937 srng(1300);
    std::vector<Case> cases = {
        {"one row", 1, 64, 64, {1}},
        {"1-row groups + empties", 40, 256, 128, {1, 0, 1, 1, 0, 0, 1}},
        {"tile edges", 400, 512, 192, {127, 128, 129, 0, 15}},
        {"n,k not tile multiples", 300, 200, 72, {17, 100, 0, 0, 183}},
        {"k 8", 300, 136, 8, {100, 0, 150}},
        {"k 40", 200, 256, 40, {70, 129}},
        {"f32 out", 300, 264, 136, {129, 0, 150}, DType::kF32},
        {"single group 1000 rows", 1000, 384, 256, {1000}},
        {"trailing rows untouched", 120, 64, 64, {1, 33, 0, 60}},
        {"256 groups", 1600, 128, 64, random_sizes(srng, 256, 6, 0.2)},
        {"896 groups", 4000, 64, 128, random_sizes(srng, 896, 4, 0.3)},
        {"896 groups graph", 4000, 72, 64, random_sizes(srng, 896, 4, 0.3), DType::kBF16, true},
        {"large groups graph", 1100, 128, 64, {600, 0, 500}, DType::kBF16, true},  // kAuto's capture rule
        {"DSV3 gate_up 7168->4096", 300, 4096, 7168, {0, 130, 161}},
        {"DSV3 down 2048->7168", 300, 7168, 2048, {200, 0, 1}},
        {"K3 gate_up 3584->6144", 300, 6144, 3584, {37, 0, 250}},
        {"K3 down 3072->3584", 300, 3584, 3072, {129, 128, 0}},
    };
    // n_groups 7 with random sizes.
    cases.push_back({"7 groups", 700, 320, 256, random_sizes(srng, 7, 90, 0.15)});
    // Pairs of consecutive tiles that share (group, n-tile) and pairs that straddle one: 3 m-tiles per group and
    // n-tile, 3 n-tiles (the last one 8 columns wide: one weight half), an odd tile count overall.
    cases.push_back({"straddling tile pairs", 1200, 520, 128, {300, 257, 0, 385}});
    cases.push_back({"even tile count", 600, 512, 64, {256, 0, 256}});
    for (Case& c : cases) {
        int64_t sum = 0;
        for (int32_t s : c.sizes) sum += s;
        if (sum > c.n_rows) c.n_rows = sum + 3;
    }
    return cases;
}

class GroupedGemmKernelTest : public CudaTest, public ::testing::WithParamInterface<cuda::GroupedGemmVariant> {};

// Every device kernel on every non-graph case.
TEST_P(GroupedGemmKernelTest, MatchesReference) {
    if (!is_sm90()) GTEST_SKIP() << "the device grouped GEMM needs sm_90";
    uint32_t seed = 1400;
    for (const Case& c : all_cases()) {
        ++seed;
        if (!c.graph) run_case(c, GetParam(), seed, alloc(), stream(), raw_stream());
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GroupedGemmKernelTest,
                         ::testing::Values(cuda::GroupedGemmVariant::kTma, cuda::GroupedGemmVariant::kTmaCluster,
                                           cuda::GroupedGemmVariant::kTmaK32, cuda::GroupedGemmVariant::kWsCpAsync,
                                           cuda::GroupedGemmVariant::kCpAsync, cuda::GroupedGemmVariant::kTmaDyn,
                                           cuda::GroupedGemmVariant::kTmaDynCluster),
                         [](const ::testing::TestParamInfo<cuda::GroupedGemmVariant>& info) {
                             return std::string(kernel_name(info.param));
                         });

// The default dispatch captured in a CUDA graph (kAuto must take a device kernel and never sync the host).
TEST_F(GroupedGemmDeviceTest, GraphCapture) {
    if (!is_sm90()) GTEST_SKIP() << "the device grouped GEMM needs sm_90";
    uint32_t seed = 1400;
    for (const Case& c : all_cases()) {
        ++seed;
        if (c.graph) run_case(c, cuda::GroupedGemmVariant::kAuto, seed, alloc(), stream(), raw_stream());
    }
}

}  // namespace
}  // namespace penstock::test

namespace penstock::test {
namespace {

// Shapes the device kernels do not take say why, and kAuto runs them on the cuBLASLt path (outside capture).
TEST_F(GroupedGemmDeviceTest, UnsupportedShapesTakeCublasLt) {
    struct Odd {
        const char* name;
        int64_t n, k;
        const char* why;
    };
    const Odd odd[] = {
        {"odd k", 64, 7, "k must be"}, {"k % 8 == 4", 72, 36, "k must be"}, {"n % 8 == 4", 100, 64, "n must be"}};
    uint32_t seed = 1500;
    for (const Odd& o : odd) {
        SCOPED_TRACE(o.name);
        std::mt19937 rng(seed++);
        const std::vector<int32_t> off = {0, 5, 5, 140};
        const Pair a = random_pair(rng, {150, o.k}, DType::kBF16, false, alloc(), stream());
        const Pair b = random_pair(rng, {3, o.n, o.k}, DType::kBF16, false, alloc(), stream());
        Pair out = poisoned_pair({150, o.n}, DType::kBF16, false, alloc(), stream());
        const Tensor off_dev = dev_i32(off, alloc(), stream());
        const kernels::GroupedGemmParams p{.out = out.dv, .a = a.dv, .b = b.dv, .offsets = off_dev};
        const char* why = cuda::grouped_gemm_device_unsupported(p);
        ASSERT_NE(why, nullptr);
        EXPECT_NE(std::string(why).find(o.why), std::string::npos) << why;
        cuda::grouped_gemm(p, raw_stream());
        ref::grouped_gemm({.out = out.hv, .a = a.hv, .b = b.hv, .offsets = i32_tensor(off)}, nullptr);
        Pair head = out;
        head.hv = out.hv.slice(0, 0, 140);
        head.dv = out.dv.slice(0, 0, 140);
        expect_pair_close(head, head.hv, kBF16Tol, stream(), false);
    }
}

// The dynamic-order TMA kernel (kTmaDyn, kAuto's choice up to 512 rows per group) launch after launch with tail-heavy
// routing over 256 experts: every launch must finish and fill every valid element with the same finite value (all
// inputs equal). A warpgroup that passes stages on without products meets at a named barrier on each stage; without
// it a lagging warp could miss its stage's phase and wait forever (tma_util.cuh, "Warps that skip").
TEST_F(GroupedGemmDeviceTest, TmaDynTailHeavyRoutingFinishes) {
    int dev = 0, major = 0;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
    if (major != 9) GTEST_SKIP() << "the TMA kernels need sm_90";
    constexpr int64_t kGroups = 256, kRows = 24576, kLaunches = 40;
    std::mt19937 rng(2612);
    for (const auto& [n, k, kernel] :
         {std::tuple<int64_t, int64_t, cuda::GroupedGemmVariant>{2048, 3072, cuda::GroupedGemmVariant::kTmaDyn},
          {3072, 1024, cuda::GroupedGemmVariant::kTmaDyn},
          {2048, 3072, cuda::GroupedGemmVariant::kTmaDynCluster},
          {3072, 1024, cuda::GroupedGemmVariant::kTmaDynCluster}}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k << " " << kernel_name(kernel));
        Tensor a = Tensor::empty({kRows, k}, DType::kBF16, alloc());
        Tensor b = Tensor::empty({kGroups, n, k}, DType::kBF16, alloc());
        cuda::fill_bytes_async(a, 0x3f, stream());  // bf16 0x3f3f = 0.746
        cuda::fill_bytes_async(b, 0x3f, stream());
        Tensor out = Tensor::empty({kRows, n}, DType::kBF16, alloc());
        for (int64_t it = 0; it < kLaunches; ++it) {
            const std::vector<int32_t> off = offsets_of(tail_heavy_sizes(rng, static_cast<int>(kGroups), kRows));
            const Tensor off_d = dev_i32(off, alloc(), stream());
            cuda::fill_bytes_async(out, 0xff, stream());  // NaN: a tile left unwritten shows
            const kernels::GroupedGemmParams p{.out = out, .a = a, .b = b, .offsets = off_d};
            ASSERT_EQ(cuda::grouped_gemm_device_unsupported(p), nullptr);
            cuda::grouped_gemm_variant(p, kernel, raw_stream());
            finish_or_exit(raw_stream(), 30.0,
                           std::string("[grouped] ") + kernel_name(kernel) + " launch " + std::to_string(it) +
                               " (n=" + std::to_string(n) + " k=" + std::to_string(k) + ")");
            ASSERT_EQ(cudaGetLastError(), cudaSuccess);
            if (it % 8 != 7) continue;
            const Tensor h = cuda::to_host(out, stream());
            const float first = element_f32(h.ptr<void>(), h.dtype(), 0);
            ASSERT_TRUE(std::isfinite(first) && first > 0.0f) << first;
            int64_t bad = 0;
            for (int64_t i = 0; i < off.back() * n; ++i) bad += element_f32(h.ptr<void>(), h.dtype(), i) != first;
            EXPECT_EQ(bad, 0) << "launch " << it << ": valid elements that differ from " << first;
        }
    }
}

// kernels::grouped_gemm_glu on CUDA: the activation fused into the default device kernel's epilogue (kTmaDynCluster's
// pairs, unless PENSTOCK_GG_PAIRS=0) and into the other one's (grouped_gemm_glu_tma) are both bit-exact with kTmaDyn
// into a [gate ; up] buffer followed by silu_mul / situ_mul (SPEC §2), for SiLU and Kimi K3's SiTU, with empty, 1-row
// and multi-tile groups and I = 128 / 384; the fused path ran (it leaves the caller's gate_up buffer untouched), says
// it needs no gate_up (grouped_gemm_glu_needs_scratch) and gives the same bytes without one; and both match the CPU
// reference to bf16 accuracy.
TEST_F(GroupedGemmDeviceTest, GluFusedIsBitExactWithUnfused) {
    int dev = 0;
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaGetDeviceProperties(&prop, dev), cudaSuccess);
    if (prop.major != 9) GTEST_SKIP() << "the device kernels need sm_90";
    struct G {
        const char* name;
        int64_t n_rows, inter, k;
        std::vector<int32_t> sizes;
        kernels::GluKind act;
    };
    const std::vector<G> cases = {
        {"silu_i128", 700, 128, 576, {0, 1, 130, 300, 0, 200, 64}, kernels::GluKind::kSilu},
        {"situ_i384_k3", 1000, 384, 1024, {257, 3, 0, 380, 129, 1, 200}, kernels::GluKind::kSitu},
        {"silu_i384_one_group", 129, 384, 64, {129}, kernels::GluKind::kSilu},
    };
    uint32_t seed = 5100;
    for (const G& c : cases) {
        SCOPED_TRACE(c.name);
        std::mt19937 rng(seed++);
        const auto n_groups = static_cast<int64_t>(c.sizes.size());
        std::vector<int32_t> off(1, 0);
        for (int32_t v : c.sizes) off.push_back(off.back() + v);
        const int64_t used = off.back();
        const Pair a = random_pair(rng, {c.n_rows, c.k}, DType::kBF16, false, alloc(), stream());
        const Pair b = random_pair(rng, {n_groups, 2 * c.inter, c.k}, DType::kBF16, false, alloc(), stream());
        const Tensor off_dev = dev_i32(off, alloc(), stream());
        Pair fused = poisoned_pair({c.n_rows, c.inter}, DType::kBF16, false, alloc(), stream());
        Pair gate_up = poisoned_pair({c.n_rows, 2 * c.inter}, DType::kBF16, false, alloc(), stream());
        const kernels::GroupedGluGemmParams gp{.out = fused.dv,
                                               .a = a.dv,
                                               .b = b.dv,
                                               .offsets = off_dev,
                                               .gate_up = gate_up.dv,
                                               .act = c.act,
                                               .situ_beta = 4.0f,
                                               .situ_linear_beta = 25.0f};
        cuda::grouped_gemm_glu(gp, raw_stream());
        // These calls take the fused kernel, so the model leaves gate_up unallocated: the same bytes without it.
        kernels::GroupedGluGemmParams no_scratch = gp;
        no_scratch.gate_up = TensorView{};
        EXPECT_FALSE(cuda::grouped_gemm_glu_needs_scratch(no_scratch, raw_stream()));
        Pair fused_ns = poisoned_pair({c.n_rows, c.inter}, DType::kBF16, false, alloc(), stream());
        no_scratch.out = fused_ns.dv;
        cuda::grouped_gemm_glu(no_scratch, raw_stream());
        // The unfused pair on the GPU: kTmaDyn into [gate ; up], then the activation op.
        Pair unfused = poisoned_pair({c.n_rows, c.inter}, DType::kBF16, false, alloc(), stream());
        Pair gu2 = poisoned_pair({c.n_rows, 2 * c.inter}, DType::kBF16, false, alloc(), stream());
        cuda::grouped_gemm_variant({.out = gu2.dv, .a = a.dv, .b = b.dv, .offsets = off_dev},
                                   cuda::GroupedGemmVariant::kTmaDyn, raw_stream());
        const TensorView g2 = gu2.dv.slice(1, 0, c.inter), u2 = gu2.dv.slice(1, c.inter, 2 * c.inter);
        if (c.act == kernels::GluKind::kSilu) {
            cuda::silu_mul({.out = unfused.dv, .gate = g2, .up = u2}, raw_stream());
        } else {
            cuda::situ_mul({.out = unfused.dv, .gate = g2, .up = u2, .beta = 4.0f, .linear_beta = 25.0f}, raw_stream());
        }
        // The same fused form on the kernel the default did not take (single CTAs or kTmaDynCluster's pairs).
        Pair paired = poisoned_pair({c.n_rows, c.inter}, DType::kBF16, false, alloc(), stream());
        int sms = 0;
        ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
        cuda::grouped_gemm_glu_tma(
            {.out = paired.dv, .a = a.dv, .b = b.dv, .offsets = off_dev},
            c.act == kernels::GluKind::kSilu ? cuda::GluEpilogue::kSilu : cuda::GluEpilogue::kSitu, 4.0f, 25.0f, sms,
            raw_stream(),
            /*pairs=*/cuda::grouped_gemm_default_device_kernel() != cuda::GroupedGemmVariant::kTmaDynCluster);
        const Readback rf = read_pair(fused, stream(), false), ru = read_pair(unfused, stream(), false);
        const Readback rp = read_pair(paired, stream(), false);
        std::vector<float> f(rf.values.begin(), rf.values.begin() + used * c.inter);
        std::vector<float> u(ru.values.begin(), ru.values.begin() + used * c.inter);
        std::vector<float> pv(rp.values.begin(), rp.values.begin() + used * c.inter);
        conf_exact("grouped_gemm_glu", std::string(c.name) + " fused vs unfused", f, u);
        conf_exact("grouped_gemm_glu", std::string(c.name) + " fused, other kernel, vs unfused", pv, u);
        const Readback rns = read_pair(fused_ns, stream(), false);
        std::vector<float> fns(rns.values.begin(), rns.values.begin() + used * c.inter);
        conf_exact("grouped_gemm_glu", std::string(c.name) + " fused without gate_up vs unfused", fns, u);
        int64_t tail_kept = 0;
        for (size_t i = static_cast<size_t>(used * c.inter); i < rp.values.size(); ++i)
            tail_kept += std::isnan(rp.values[i]);
        EXPECT_EQ(tail_kept, static_cast<int64_t>(rp.values.size()) - used * c.inter)
            << "other kernel: rows past the groups";
        const Readback rg = read_pair(gate_up, stream(), false);
        int64_t touched = 0;
        for (float v : rg.values) touched += !std::isnan(v);
        EXPECT_EQ(touched, 0) << "the fused path should leave gate_up untouched (did the unfused path run?)";
        // Against the CPU reference (f32 throughout): bf16 accuracy.
        Tensor ref_gu = Tensor::empty({c.n_rows, 2 * c.inter}, DType::kF32);
        ref::grouped_gemm_glu({.out = fused.hv,
                               .a = a.hv,
                               .b = b.hv,
                               .offsets = i32_tensor(off),
                               .gate_up = ref_gu,
                               .act = c.act,
                               .situ_beta = 4.0f,
                               .situ_linear_beta = 25.0f},
                              nullptr);
        std::vector<float> want = read_f32(fused.hv);
        want.resize(static_cast<size_t>(used * c.inter));
        conf_close("grouped_gemm_glu", std::string(c.name) + " vs reference", f, want, kBF16Tol, {used, c.inter});
    }
}

}  // namespace
}  // namespace penstock::test
