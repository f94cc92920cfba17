# Sanitizer and fuzzing builds. Both instrument the whole build (our code only: Boost, HDF5 and fmt are Debian's
# uninstrumented libraries), so an out-of-bounds access anywhere in our code is caught whichever test reaches it.
#
# Host code only: nvcc does not take these flags (the sanitizer build turns CUDA off; compute-sanitizer checks the
# kernels, scripts/gpu_sanitize.sh).
# REPLAYSSM_SANITIZE: ASan + UBSan with g++ or clang++. Any report aborts the process (-fno-sanitize-recover, and
#   halt_on_error in ASAN_OPTIONS), so a test that triggers one fails. scripts/test.sh builds this in build-asan/.
# REPLAYSSM_FUZZ: libFuzzer targets in tests/fuzz (clang++ only). Everything is compiled with coverage
#   instrumentation for the fuzzer (fuzzer-no-link) plus ASan + UBSan; only the fuzz targets link libFuzzer's main.
#   scripts/fuzz.sh builds this in build-fuzz/.
set(REPLAYSSM_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)

if(REPLAYSSM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "replayssm: REPLAYSSM_FUZZ=ON needs clang++ (libFuzzer); configure with "
                        "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang, or use scripts/fuzz.sh")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${REPLAYSSM_SANITIZER_FLAGS};-fsanitize=fuzzer-no-link;-g>")
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(REPLAYSSM_SANITIZE)
  # -O1 instead of the build type's -O3: the instrumented code compiles about twice as fast (CI has 2 cores) and
  # the tests still run in seconds; -g makes the reports name file and line.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${REPLAYSSM_SANITIZER_FLAGS};-g;-O1>")
  # GCC 12 under ASan warns about libstdc++'s own std::regex internals (a known false positive of
  # -Wmaybe-uninitialized, which the sanitizers' extra code paths confuse); the normal build keeps the warning.
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>")
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=all)
endif()
