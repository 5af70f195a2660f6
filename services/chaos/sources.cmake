# `supernode chaos`, the fault-injection runner: plans, target resolution, the report.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/fault_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chaos_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chaos_timeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fault_timing.cpp
)
