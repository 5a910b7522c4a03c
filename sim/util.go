package sim

import (
	"cmp"
	"maps"
	"slices"
)

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
