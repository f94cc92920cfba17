# Provenance for result files: the git commit the build came from (with "-dirty" when the tree had changes).
# Evaluated at configure time and on every build through a small generated header.
set(REPLAYSSM_VERSION_IN "${CMAKE_CURRENT_LIST_DIR}/version.h.in")
set(REPLAYSSM_VERSION_OUT "${CMAKE_BINARY_DIR}/generated/replayssm_version.h")
add_custom_target(replayssm_version_header
  COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DIN=${REPLAYSSM_VERSION_IN} -DOUT=${REPLAYSSM_VERSION_OUT}
          -DVERSION=${PROJECT_VERSION} -P ${CMAKE_CURRENT_LIST_DIR}/gen_version.cmake
  BYPRODUCTS ${REPLAYSSM_VERSION_OUT}
  COMMENT "replayssm: recording git commit")
