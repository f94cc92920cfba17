# Writes OUT from IN with the git commit of SRC; only touches OUT when the text changes (no needless rebuilds).
execute_process(COMMAND git -C "${SRC}" rev-parse HEAD OUTPUT_VARIABLE GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR GIT_COMMIT STREQUAL "")
  set(GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no OUTPUT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(GIT_COMMIT "${GIT_COMMIT}-dirty")
  endif()
endif()
configure_file("${IN}" "${OUT}.tmp" @ONLY)
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
