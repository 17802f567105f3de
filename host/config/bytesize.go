package config

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes. In YAML and environment variables it is a
// plain integer or a number with a unit: B, KiB, MiB, GiB (powers of 1024)
// or KB, MB, GB (powers of 1000), e.g. "4MiB".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// UnmarshalText parses "4MiB", "512KB", "1024".
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q: want a non-negative integer with an optional unit (B, KiB, MiB, GiB, KB, MB, GB)", string(text))
	}
	if n > (1<<62)/mult {
		return fmt.Errorf("invalid size %q: too large", string(text))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalText writes the size in the largest exact binary unit.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

func (b ByteSize) String() string {
	n := int64(b)
	switch {
	case n != 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}
