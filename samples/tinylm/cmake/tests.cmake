# tests: see CMakeLists.txt
