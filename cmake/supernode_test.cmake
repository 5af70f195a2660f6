# supernode_add_test(NAME SOURCES a.cpp ... LIBS lib ... LABEL unit|kernel|model|integration
#                    [FIXTURE fixture] [RESOURCE_LOCK lock])
# One gtest executable per call; each TEST becomes a ctest entry carrying the label, so
# `./supernode test -L unit` is the quick loop on two cores. Paths the tests need are compiled
# in, not passed through the environment, so a test binary also runs by hand.
function(supernode_add_test name)
  cmake_parse_arguments(T "" "LABEL;FIXTURE;RESOURCE_LOCK" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE supernode_internal ${T_LIBS} GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    SUPERNODE_TEST_MODEL_DIR="${CMAKE_BINARY_DIR}/test-models"
    SUPERNODE_TOKENIZER_DIR="${SUPERNODE_TOKENIZER_DIR}"
    SUPERNODE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    SUPERNODE_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # Actor threads never block: a role handler over the bound aborts its process, so the test
  # that drove it fails (actors/role/handler_watch.hpp). Sanitized builds run slower.
  set(handler_limit_ms 50)
  if(SUPERNODE_SANITIZE)
    set(handler_limit_ms 250)
  endif()
  set(props LABELS ${T_LABEL} ENVIRONMENT SUPERNODE_ACTOR_HANDLER_LIMIT_MS=${handler_limit_ms})
  if(T_FIXTURE)
    list(APPEND props FIXTURES_REQUIRED ${T_FIXTURE})
  endif()
  # Tests holding the same lock never run side by side (ctest -j2): for clusters heavy enough
  # that two of them starve each other's gateways on two cores.
  if(T_RESOURCE_LOCK)
    list(APPEND props RESOURCE_LOCK ${T_RESOURCE_LOCK})
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
endfunction()
