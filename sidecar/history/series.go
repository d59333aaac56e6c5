package history

import (
	"math"
	"strconv"
)

// Series is one line's values; NaN, a gap, is written as null in JSON.
type Series []float64

// MarshalJSON writes the values as numbers without exponent, gaps as null.
func (s Series) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+len(s)*8)
	b = append(b, '[')
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendFloat(b, v, 'f', -1, 64)
		}
	}
	return append(b, ']'), nil
}
