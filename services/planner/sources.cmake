# The SLO planner's decisions (instance counts, P<->D switches, the decode batch cap) on a clock
# the caller passes in, its metrics, and the rate schedules the scale benchmark runs.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tpot_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner_metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rate_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner_sampler.cpp
)
