package console

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// Every string a client sends is cleaned here, at the edge, before it is
// looked at, stored or shown to anyone: a job name or action id full of
// terminal escape sequences would otherwise reach the audit log and, through
// the event list, every operator's terminal (a changed pane title, a forged
// "APPROVED" line), and a 1 MB reason would be written to the store and
// sent in every viewer's snapshot.

// Bounds on the strings of a client frame, in bytes (textclean's).
const (
	// MaxNameBytes bounds names and identifiers: jobs, action ids, nodes,
	// policies, modes, parameter names, the client's name.
	MaxNameBytes = textclean.MaxNameBytes
	// MaxReasonBytes bounds free text: an approval's reason, a trigger's
	// reason.
	MaxReasonBytes = textclean.MaxReasonBytes
)

// Clean returns s without control characters (C0, DEL, C1) and Unicode
// bidirectional overrides, cut to at most max bytes (textclean.Clean).
// The scheduler's packages that take strings from nodes (manager,
// coordinator, daemon) call textclean itself.
func Clean(s string, max int) string { return textclean.Clean(s, max) }

// clean is Clean; keepLines keeps tabs and line breaks (a spec's YAML).
func clean(s string, max int, keepLines bool) string {
	if keepLines {
		return textclean.Lines(s, max)
	}
	return textclean.Clean(s, max)
}

// Fields with their own bound (proto field names); every other string gets
// MaxNameBytes, except a submitted spec, which the spec limits bound
// (spec.Limits) and which keeps its line breaks.
var (
	reasonFields = map[protoreflect.Name]bool{"reason": true}
	specFields   = map[protoreflect.Name]bool{"spec_yaml": true}
)

// cleanFrame cleans every string of a client frame in place: fields, list
// elements, map keys and values, in nested messages too.
func cleanFrame(f *consolepb.ClientFrame) { cleanMessage(f.ProtoReflect()) }

func cleanMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			cleanMap(fd, v.Map())
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				switch fd.Kind() {
				case protoreflect.StringKind:
					l.Set(i, protoreflect.ValueOfString(cleanField(fd, l.Get(i).String())))
				case protoreflect.MessageKind, protoreflect.GroupKind:
					cleanMessage(l.Get(i).Message())
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); s != "" {
				if c := cleanField(fd, s); c != s {
					m.Set(fd, protoreflect.ValueOfString(c))
				}
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			cleanMessage(v.Message())
		}
		return true
	})
}

func cleanField(fd protoreflect.FieldDescriptor, s string) string {
	switch {
	case fd.Name() == "token":
		return s // compared, never stored or shown
	case specFields[fd.Name()]:
		return clean(s, 0, true)
	case reasonFields[fd.Name()]:
		return Clean(s, MaxReasonBytes)
	}
	return Clean(s, MaxNameBytes)
}

// cleanMap rebuilds a map whose keys or values need cleaning (keys cannot be
// changed in place). Two keys that clean to the same key keep one value.
func cleanMap(fd protoreflect.FieldDescriptor, mp protoreflect.Map) {
	type entry struct {
		old protoreflect.MapKey
		key string
		val protoreflect.Value
	}
	stringKeys := fd.MapKey().Kind() == protoreflect.StringKind
	stringVals := fd.MapValue().Kind() == protoreflect.StringKind
	var changed []entry
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		if fd.MapValue().Kind() == protoreflect.MessageKind {
			cleanMessage(v.Message())
		}
		key, keyChanged := "", false
		if stringKeys {
			key = Clean(k.String(), MaxNameBytes)
			keyChanged = key != k.String()
		}
		val, valChanged := v, false
		if stringVals {
			c := Clean(v.String(), MaxNameBytes)
			val, valChanged = protoreflect.ValueOfString(c), c != v.String()
		}
		if keyChanged || valChanged {
			changed = append(changed, entry{k, key, val})
		}
		return true
	})
	for _, e := range changed {
		mp.Clear(e.old)
	}
	for _, e := range changed {
		k := e.old
		if stringKeys {
			if e.key == "" {
				continue
			}
			k = protoreflect.ValueOfString(e.key).MapKey()
		}
		mp.Set(k, e.val)
	}
}
