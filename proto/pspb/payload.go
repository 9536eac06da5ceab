package pspb

// SetData replaces the request's payload (used by the raw-bytes codec).
func (x *PSRequest) SetData(b []byte) { x.Data = b }

// SetData replaces the response's payload (used by the raw-bytes codec).
func (x *PSResponse) SetData(b []byte) { x.Data = b }

// SetData replaces the migration payload (used by the raw-bytes codec).
func (x *MigrateRequest) SetData(b []byte) { x.Data = b }
