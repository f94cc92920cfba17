# Warnings for every target of ours (not for dependencies).
add_library(replayssm_warnings INTERFACE)
target_compile_options(replayssm_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unknown-pragmas>)
