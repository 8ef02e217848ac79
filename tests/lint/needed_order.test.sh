#!/usr/bin/env bash
# Every torch-linked binary binds the C++ standard library's symbols to libstdc++, never to copies
# that LibTorch exports: libstdc++ comes first in its NEEDED list (checked statically, since
# Debian's LibTorch exports no such copy that a run could catch), and a run of each tool (every symbol bound at load) binds no
# std:: symbol of ours into libtorch or libc10 (LD_DEBUG). The check fails on a binary linked the
# usual way (LibTorch, then g++'s implicit -lstdc++), which is how the tools were linked before.
set -euo pipefail
: "${TC_SOURCE:?}" "${TC_BUILD:?}"
check="$TC_SOURCE/tests/lint/check-needed-order"
fail() { echo "FAIL: $*" >&2; exit 1; }

engines="$TC_BUILD/lib/libtraincache_engines.so"
bins=("$TC_BUILD"/bin/* "$engines" "$TC_BUILD"/tests/encoder_test)
[ ! -e "$TC_BUILD/lib/libtraincache_cuda.so" ] || bins+=("$TC_BUILD/lib/libtraincache_cuda.so")
"$check" "${bins[@]}" || fail "a torch-linked binary lists LibTorch before libstdc++"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for tool in cache-fill cache-inspect gc-train smart-bench; do
  # LD_DEBUG_OUTPUT unset, not empty: an empty one sends the report to a file on newer glibc, and
  # the check then saw nothing and passed (it did on the GPU machine's Ubuntu 24.04). The report
  # (170,000 lines, 30 MB) is filtered in the pipe to the bindings of our own three objects: held in
  # a shell variable and searched three times it took 5 s a tool instead of 2.
  env -u LD_DEBUG_OUTPUT LD_DEBUG=bindings LD_BIND_NOW=1 "$TC_BUILD/bin/$tool" --version 2>&1 >/dev/null |
    grep -E "binding file [^ ]*/($tool|libtraincache_engines\.so|libtraincache_core\.so) \[0\] to " >"$work/ours" || true
  grep -q "binding file [^ ]*/$tool \[0\] to " "$work/ours" || fail "$tool: LD_DEBUG reported no binding of the tool"
  # They load LibTorch with libtraincache_engines.so, for --version's runtime lines.
  grep -q "binding file [^ ]*/libtraincache_engines.so \[0\] to " "$work/ours" ||
    fail "$tool --version: LD_DEBUG reported no binding of libtraincache_engines.so"
  bindings=$(grep -E " to [^ ]*lib(torch|c10)[^ ]* .*symbol \`_Z(NSt|St|NKSt)" "$work/ours" || true)
  [ -z "$bindings" ] || fail "$tool binds std:: symbols into LibTorch: $(head -3 <<<"$bindings")"
done

# A binary linked as the tools were: the check must name it.
c10=$(ldd "$engines" | sed -n 's/.*libc10[^ ]* => \([^ ]*\) .*/\1/p' | head -1)
[ -n "$c10" ] || fail "libtraincache_engines.so links no libc10"
printf '#include <string>\nint main() { return std::string("x").size() == 1 ? 0 : 1; }\n' > "$work/m.cpp"
c++ "$work/m.cpp" -o "$work/usual" -Wl,--no-as-needed "$c10"
rc=0
err=$("$check" "$work/usual" 2>&1) || rc=$?
[ "$rc" = 1 ] || fail "a binary with libc10 before libstdc++ passed the check (rc $rc)"
grep -qF "$work/usual: libstdc++ comes after libc10" <<<"$err" || fail "not named: $err"
# With libstdc++ linked statically it defines what it calls (std::filesystem here), and passes.
printf '#include <filesystem>\nint main(int, char** v) { std::error_code e; std::filesystem::remove_all(v[0] + std::string("x"), e); }\n' > "$work/s.cpp"
c++ "$work/s.cpp" -o "$work/static" -static-libstdc++ -Wl,--no-as-needed "$c10"
"$check" "$work/static" || fail "a binary with libstdc++ linked statically was refused"
echo "ok"
