package loadtest

import (
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// protoSize is the size of a message as the console sends it (protojson).
func protoSize(m proto.Message) int {
	b, _ := protojson.Marshal(m)
	return len(b)
}
