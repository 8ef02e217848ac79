// How the image code's SIMD loops are built: GCC's and Clang's vector extensions, which compile to
// the target's SIMD instructions without the intrinsics of one instruction set; on x86-64 each
// function marked TC_SIMD_CLONES is built for AVX-512, AVX2 and the baseline (SSE2) and the library
// picks one when it loads (target_clones: the build for one CPU runs on any).
#pragma once

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TC_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef TC_SIMD_CLONES
#define TC_SIMD_CLONES
#endif
// What the clones call is inlined into each, so that it is built for the clone's instructions.
#define TC_SIMD_INLINE inline __attribute__((always_inline))
