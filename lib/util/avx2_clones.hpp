// WANTRAIN_AVX2_CLONES: compile a function for AVX2 too, chosen at load time
// by the CPU (an ifunc), for loops the compiler vectorises. Not under
// ThreadSanitizer, whose runtime starts after ifunc resolvers run.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
#define WANTRAIN_X86_CLONES 1
#define WANTRAIN_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define WANTRAIN_X86_CLONES 0
#define WANTRAIN_AVX2_CLONES
#endif
