package runtime

import (
	"errors"
	"sort"
)

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinErrs(errs []error) error {
	return errors.Join(errs...)
}
