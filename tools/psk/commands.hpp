// Subcommands of the psk tool; each takes the arguments after its name and returns an exit code.
#pragma once

int runInfo(int argc, char** argv);
int runDemo(int argc, char** argv);
int runRun(int argc, char** argv);
int runBench(int argc, char** argv);
int runConformance(int argc, char** argv);
int runTune(int argc, char** argv);
int runMicro(int argc, char** argv);
int runCompile(int argc, char** argv);
