#!/usr/bin/env bash
# Namespace check: every global symbol the static libraries define is lockstep's, so they
# link next to anything else (ggml defines gguf_find_tensor, for one). Usage:
#   check_symbols.sh LIB.a...
# Accepted:
#   - C symbols starting with ls_ (and AddressSanitizer's __odr_asan.ls_... indicators);
#   - C++ symbols (the CUDA backend) whose demangled name starts with ls_ or ls:: ;
#   - C++ anonymous-namespace entities: nvcc gives them global mangled names containing
#     _GLOBAL__N_ (kernels, their __device_stub__ wrappers, file-local helpers), but they are
#     internal by the language's rules and a unique per-file name keeps them from clashing;
#   - the CUDA runtime's registration symbols nvcc emits per file (__cudaRegister*,
#     __fatbinwrap*, __nv_*), and weak C++ runtime/library instantiations (std::..., the
#     personality routine reference DW.ref.__gxx_personality_v0): weak symbols merge with any
#     other copy instead of clashing.
# Anything else is listed and the check fails.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 LIB.a..." >&2
  exit 2
fi
bad=0
for lib in "$@"; do
  if [ ! -f "$lib" ]; then
    echo "check_symbols: no such library: $lib" >&2
    exit 2
  fi
  # posix format: "NAME TYPE VALUE SIZE" per symbol, "LIB[MEMBER.o]:" per archive member.
  while read -r name type; do
    name="${name#__odr_asan.}" # AddressSanitizer's ODR indicator of global NAME
    case "$name" in
      ls_*) continue ;;
      __cudaRegister* | __fatbinwrap* | __nv_*) continue ;;
      *_GLOBAL__N_*) continue ;;
      DW.ref.__gxx_personality_v0) continue ;;
    esac
    if [[ "$name" == _Z* ]]; then
      dm=$(c++filt "$name")
      case "$dm" in
        ls_* | ls::*) continue ;;
      esac
      # a weak instantiation of a standard-library template (its return type may come first)
      if [[ ("$type" == W || "$type" == V) && "$dm" =~ ^([^\(]*[ ])?std:: ]]; then continue; fi
      echo "$lib: $type $name ($dm)"
    else
      echo "$lib: $type $name"
    fi
    bad=$((bad + 1))
  done < <(nm -g --defined-only -f posix "$lib" | awk 'NF >= 2 && $0 !~ /\]:$/ && $0 !~ /:$/ {print $1, $2}')
done
if [ "$bad" -ne 0 ]; then
  echo "check_symbols: $bad global symbol(s) without the ls_ prefix (rename them ls_..., or make them static)" >&2
  exit 1
fi
echo "check_symbols: every global symbol of $# librar$([ $# -eq 1 ] && echo y || echo ies) is ls_-prefixed"
