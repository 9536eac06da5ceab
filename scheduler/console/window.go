package console

import (
	"google.golang.org/grpc/codes"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// A subscription's ViewWindow trims the job's detail views to what the
// client shows of them (consoleapi.TrimView, or the backend itself when it
// is a consoleapi.WindowBackend); this file checks the windows clients ask
// for.

// heavy are the JobView fields a window trims, and that patches carry apart
// from the job's figures.
var heavy = map[protoreflect.Name]bool{
	"nodes": true, "heatmap": true, "charts": true, "actions": true, "policies": true, "spec_yaml": true,
}

// MaxWindowFilter bounds ViewWindow.filter.
const MaxWindowFilter = 256

// checkWindow refuses windows whose numbers make no sense.
func checkWindow(w *consolepb.ViewWindow) error {
	if w == nil {
		return nil
	}
	switch {
	case w.GetSort() != consoleapi.SortListed && w.GetSort() != consoleapi.SortRatio && w.GetSort() != consoleapi.SortName:
		return errorf(codes.InvalidArgument, "console: subscribe: window.sort %q must be empty, %q or %q", w.GetSort(), consoleapi.SortRatio, consoleapi.SortName)
	case len(w.GetFilter()) > MaxWindowFilter:
		return errorf(codes.InvalidArgument, "console: subscribe: window.filter is %d bytes (at most %d)", len(w.GetFilter()), MaxWindowFilter)
	case w.GetOffset() < 0 || w.GetLimit() < 0 || w.GetLimit() > consoleapi.MaxWindowRows:
		return errorf(codes.InvalidArgument, "console: subscribe: window offset %d and limit %d must not be negative, limit at most %d",
			w.GetOffset(), w.GetLimit(), consoleapi.MaxWindowRows)
	case w.GetHeatmapRows() < 0 || w.GetChartSeries() < 0:
		return errorf(codes.InvalidArgument, "console: subscribe: window heatmap_rows %d and chart_series %d must not be negative",
			w.GetHeatmapRows(), w.GetChartSeries())
	}
	return nil
}
