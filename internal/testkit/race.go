//go:build race

package testkit

// RaceEnabled reports whether the test binary was built with the race
// detector (-race).
const RaceEnabled = true
