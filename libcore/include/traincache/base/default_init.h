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
    // For bytes and such, nothing: `new (p) U` compiles to a store of an indeterminate value, one
    // element at a time (GCC 12), which cost 1.3% of a photo fill.
    if constexpr (!std::is_trivially_default_constructible_v<U>) ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// Bytes that resize() does not zero.
using ByteBuffer = std::vector<uint8_t, DefaultInit<uint8_t>>;

/// Resizes a buffer whose elements are all about to be overwritten: where it grows past its
/// capacity the old elements are dropped, not copied (vector copies them one at a time through an
/// allocator of its own: 1.3% of a photo fill, each photo's buffer larger than the last).
template <class T>
void resize_for_overwrite(std::vector<T, DefaultInit<T>>& v, std::size_t n) {
  if (n > v.capacity()) v.clear();
  v.resize(n);
}

}  // namespace traincache
