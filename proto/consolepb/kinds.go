package consolepb

import "strings"

// actionKindPrefix is the enum's prefix, which the console API's names
// ("ADJUST_BS") leave out.
const actionKindPrefix = "ACTION_KIND_"

// ActionKindName is the console API's name of an action kind: "ADJUST_BS"
// for ACTION_KIND_ADJUST_BS; "" for ACTION_KIND_UNSPECIFIED or a number
// the enum does not define.
func ActionKindName(k ActionKind) string {
	n, ok := ActionKind_name[int32(k)]
	if !ok || k == ActionKind_ACTION_KIND_UNSPECIFIED {
		return ""
	}
	return strings.TrimPrefix(n, actionKindPrefix)
}

// ParseActionKind reads an action kind's console API name ("ADJUST_BS").
// The full enum name is accepted as well.
func ParseActionKind(name string) (ActionKind, bool) {
	v, ok := ActionKind_value[actionKindPrefix+name]
	if !ok {
		v, ok = ActionKind_value[name]
	}
	if !ok || v == int32(ActionKind_ACTION_KIND_UNSPECIFIED) {
		return ActionKind_ACTION_KIND_UNSPECIFIED, false
	}
	return ActionKind(v), true
}
