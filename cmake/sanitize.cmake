# ASan + UBSan for the whole build when REPLAYSSM_SANITIZE is on. Any report aborts the process, so a test that
# triggers one fails.
if(REPLAYSSM_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=all)
endif()
