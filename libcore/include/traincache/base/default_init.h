// An allocator for buffers that their producer overwrites whole (decoded pixels, resampled rows):
// std::vector's resize() with it leaves new elements default-initialised, which for bytes means
// not written, where std::allocator zeroes them first. cache-fill's reader zeroed each photo's
// buffer and then decoded over it: 2-3% of its time on photos of mixed sizes.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace traincache {

template <class T>
struct DefaultInit : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = DefaultInit<U>;
  };
  DefaultInit() noexcept = default;
  template <class U>
  DefaultInit(const DefaultInit<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// Bytes that resize() does not zero.
using ByteBuffer = std::vector<uint8_t, DefaultInit<uint8_t>>;

}  // namespace traincache
