//go:build race

package lock

// raceEnabled: the race detector slows the simulation about tenfold.
const raceEnabled = true
