//go:build race

package kserve

const raceEnabled = true
