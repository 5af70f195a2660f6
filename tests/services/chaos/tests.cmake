# The fault-injection runner's logic (services/chaos): plans, targets, timing and the report.
supernode_add_test(chaos_unit_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/fault_plan_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/fault_timing_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/chaos_report_test.cpp
  LIBS supernode_services
  LABEL unit)
