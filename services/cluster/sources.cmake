# Running a cluster's processes: the launcher, `supernode role` processes, generated configs.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/process_launcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/role_launch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cluster_file.cpp
)
