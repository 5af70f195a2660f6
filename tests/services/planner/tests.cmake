# The SLO planner without processes: its rules on hand-made samples and on a step load from a
# tiny queueing model, the TPOT line behind the batch cap, rate schedules, and [planner].
supernode_add_test(planner_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/planner_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/planner_batch_cap_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/planner_step_load_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/tpot_model_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/rate_schedule_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/planner_config_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/planner_sampler_test.cpp
  LIBS supernode_services
  LABEL unit)
target_link_libraries(planner_test PRIVATE nlohmann_json::nlohmann_json)
