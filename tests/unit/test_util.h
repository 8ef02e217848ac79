// Helpers shared by the unit tests.
#pragma once

#include <functional>

#include "traincache/error.h"

namespace traincache::test {

/// The exit code of the traincache::Error `f` throws, or Exit::ok when it returns.
inline Exit code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return Exit::ok;
}

}  // namespace traincache::test
