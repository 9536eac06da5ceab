package themes

import (
	"fmt"
	"sort"
	"strings"
)

// A heatmap palette runs from cool (a node at or below the job's pace) to hot (a straggler).
var palettes = map[string][]string{
	// heat: blue through yellow to red, the usual "temperature" reading.
	"heat": {"#1a2a6c", "#1f4e9c", "#2c7bb6", "#00a6ca", "#00ccbc", "#90eb9d",
		"#ffff8c", "#f9d057", "#f29e2e", "#e76818", "#d7191c"},
	// viridis: perceptually uniform and readable with the common colour-vision deficiencies.
	"viridis": {"#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
		"#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725"},
	// gray: luminance only, for monochrome terminals and printouts.
	"gray": {"#1c1c1c", "#303030", "#444444", "#585858", "#6c6c6c", "#808080",
		"#949494", "#a8a8a8", "#bcbcbc", "#d0d0d0", "#eeeeee"},
}

// ColorBlindSafe is the palette to pick for colour-vision deficiencies.
const ColorBlindSafe = "viridis"

// Palette returns a copy of the named heatmap palette, cool to hot.
func Palette(name string) ([]string, error) {
	p, ok := palettes[strings.ToLower(name)]
	if !ok {
		return nil, fmt.Errorf("themes: unknown heatmap palette %q (have %s)", name, strings.Join(PaletteNames(), ", "))
	}
	return append([]string(nil), p...), nil
}

// PaletteNames lists the heatmap palettes, sorted.
func PaletteNames() []string {
	names := make([]string, 0, len(palettes))
	for n := range palettes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
