//go:build race

package citus

const raceEnabled = true
