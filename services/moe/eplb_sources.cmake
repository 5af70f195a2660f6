# EPLB: replica planning from observed expert load, and the skewed routing that exercises it.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/eplb_planner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/skewed_routing.cpp
)
