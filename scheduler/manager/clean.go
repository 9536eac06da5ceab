package manager

import (
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// The strings of an agent's stream are the node's words: its host and
// address, how its role last ended, why an action failed, the secondaries a
// primary reached or not and why. They reach the event list, the store,
// the actions' reasons and every operator's terminal, so they are bounded
// and stripped of control characters where they arrive, before any of it
// (a node that sends "\x1b]0;…" as its host must not retitle a console).

// cleanName bounds a name, id or address a node sent.
func cleanName(s string) string { return textclean.Clean(s, textclean.MaxNameBytes) }

// cleanText bounds free text a node sent (an error, an exit).
func cleanText(s string) string { return textclean.Clean(s, textclean.MaxReasonBytes) }

// cleanHello cleans an agent's hello in place. Its job and node are looked
// up, not shown, before they are known to be the scheduler's own names.
func cleanHello(h *agentpb.AgentHello) {
	h.Host, h.PeerAddr = cleanName(h.Host), cleanName(h.PeerAddr)
	for i, id := range h.AppliedActions {
		h.AppliedActions[i] = cleanName(id)
	}
}

// cleanAgentMessage cleans the strings of one agent message in place. A
// refusal report is the daemon's to clean (NodeRefusal: its own bounds per
// field, and its metric labels only in known forms).
func cleanAgentMessage(msg *agentpb.AgentMessage) {
	switch b := msg.Body.(type) {
	case *agentpb.AgentMessage_Heartbeat:
		if st := b.Heartbeat.GetStatus(); st != nil {
			st.LastExit = cleanText(st.LastExit)
		}
	case *agentpb.AgentMessage_Ack:
		b.Ack.ActionId, b.Ack.Error = cleanName(b.Ack.ActionId), cleanText(b.Ack.Error)
	case *agentpb.AgentMessage_Forwarded:
		f := b.Forwarded
		f.ActionId = cleanName(f.ActionId)
		for i, p := range f.Reached {
			f.Reached[i] = cleanName(p)
		}
		for _, u := range f.Unreached {
			if u != nil {
				u.Peer, u.Error = cleanName(u.Peer), cleanText(u.Error)
			}
		}
	}
}
