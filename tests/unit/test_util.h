// Helpers shared by the unit tests.
#pragma once

#include <functional>
#include <string>

#include "traincache/base/error.h"

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

/// The message (what()) of the traincache::Error `f` throws, or "" when it returns.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace traincache::test
