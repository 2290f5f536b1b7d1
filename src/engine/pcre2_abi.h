// The part of the PCRE2 8-bit API that regex.cc uses. With PENSTOCK_PCRE2_HEADER=1 it comes from <pcre2.h>; with 0
// (a machine with the runtime libpcre2-8.so.0 but not libpcre2-dev, e.g. the Ubuntu 24.04 GPU machine) the stable
// 10.x ABI is declared here: the functions are exported by the runtime library under these names, and the
// constants are part of that ABI. Only regex.cc includes this file.
#pragma once

#include <cstddef>
#include <cstdint>

#if PENSTOCK_PCRE2_HEADER
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#else
extern "C" {
typedef struct pcre2_real_code_8 pcre2_code_8;
typedef struct pcre2_real_match_data_8 pcre2_match_data_8;
typedef struct pcre2_real_compile_context_8 pcre2_compile_context_8;
typedef struct pcre2_real_general_context_8 pcre2_general_context_8;
typedef struct pcre2_real_match_context_8 pcre2_match_context_8;
pcre2_code_8* pcre2_compile_8(const uint8_t* pattern, size_t length, uint32_t options, int* errorcode,
                              size_t* erroroffset, pcre2_compile_context_8* ccontext);
int pcre2_jit_compile_8(pcre2_code_8* code, uint32_t options);
void pcre2_code_free_8(pcre2_code_8* code);
pcre2_match_data_8* pcre2_match_data_create_from_pattern_8(const pcre2_code_8* code, pcre2_general_context_8* gcontext);
void pcre2_match_data_free_8(pcre2_match_data_8* match_data);
int pcre2_match_8(const pcre2_code_8* code, const uint8_t* subject, size_t length, size_t startoffset, uint32_t options,
                  pcre2_match_data_8* match_data, pcre2_match_context_8* mcontext);
size_t* pcre2_get_ovector_pointer_8(pcre2_match_data_8* match_data);
int pcre2_get_error_message_8(int errorcode, uint8_t* buffer, size_t bufflen);
}
#endif

namespace penstock::engine::pcre2 {

inline constexpr uint32_t kUtf = 0x00080000u;
inline constexpr uint32_t kUcp = 0x00020000u;
inline constexpr uint32_t kNoUtfCheck = 0x40000000u;
inline constexpr uint32_t kNoJit = 0x00002000u;
inline constexpr uint32_t kJitComplete = 0x00000001u;
inline constexpr int kErrorNoMatch = -1;
inline constexpr int kErrorJitStackLimit = -46;

#if PENSTOCK_PCRE2_HEADER
static_assert(kUtf == PCRE2_UTF && kUcp == PCRE2_UCP && kNoUtfCheck == PCRE2_NO_UTF_CHECK && kNoJit == PCRE2_NO_JIT &&
              kJitComplete == PCRE2_JIT_COMPLETE && kErrorNoMatch == PCRE2_ERROR_NOMATCH &&
              kErrorJitStackLimit == PCRE2_ERROR_JIT_STACKLIMIT);
#endif

}  // namespace penstock::engine::pcre2
