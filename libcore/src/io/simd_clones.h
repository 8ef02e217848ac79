// How the image code's SIMD loops are built: GCC's and Clang's vector extensions, which compile to
// the target's SIMD instructions without the intrinsics of one instruction set.
//
// Loops on vectors as wide as every x86-64 CPU's (16 bytes or less) are marked TC_SIMD_CLONES: on
// x86-64 each is built for AVX-512, AVX2 and the baseline (SSE2) and the library picks one when it
// loads (target_clones: the build for one CPU runs on any).
//
// Loops on wider vectors are written for a lane count L and built once per L, each with the
// instructions whose registers hold L int32 lanes (TC_SIMD_16: AVX-512, TC_SIMD_8: AVX2, none for
// 4), the caller choosing by simd_lanes(). A vector wider than the target's registers is not split
// into registers by GCC 12 but kept in memory: the AVX2 build of 16-lane loops ran 5x slower than
// the same loops on 8 lanes.
#pragma once

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TC_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#define TC_SIMD_16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2")))
#define TC_SIMD_8 __attribute__((target("avx2,fma,bmi,bmi2")))
#endif
#ifndef TC_SIMD_CLONES
#define TC_SIMD_CLONES
#endif
#ifndef TC_SIMD_16
#define TC_SIMD_16
#define TC_SIMD_8
#endif
// What the clones call is inlined into each, so that it is built for the clone's instructions.
#define TC_SIMD_INLINE inline __attribute__((always_inline))

namespace traincache::io {

// The int32 lanes of this CPU's vector registers that TC_SIMD_16 and TC_SIMD_8 build for: 16 where
// it has what TC_SIMD_16 uses, 8 where it has what TC_SIMD_8 uses, else 4 (SSE2, and the 16-byte
// vectors of other architectures); fewer where TRAINCACHE_MAX_CPU_ISA holds the image code to a
// smaller set (simd.cpp). Chosen at the first call. tests/CMakeLists.txt runs the image tests on
// each under QEMU.
int simd_lanes();

}  // namespace traincache::io
