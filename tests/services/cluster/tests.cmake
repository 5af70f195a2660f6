# Running a cluster's processes (services/cluster): the launcher with /bin/sh as the child, and
# the generated configs.
supernode_add_test(cluster_launch_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/process_launcher_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cluster_file_test.cpp
  LIBS supernode_services
  LABEL unit)
