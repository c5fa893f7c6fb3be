package benchbus

// DiesWithBench is diesWithBench, for the external tests' stand-in bench.
var DiesWithBench = diesWithBench
