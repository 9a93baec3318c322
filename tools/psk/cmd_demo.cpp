int runDemo(int, char**) { return 0; }
