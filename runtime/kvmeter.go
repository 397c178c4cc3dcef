package runtime

import "time"

// kvMeter integrates reserved and live KV bytes over wall time. reserved is
// piecewise constant between set calls; live grows with tokens.
type kvMeter struct {
	start, last    time.Time
	reserved       int64
	live           int64
	peak           int64
	reservedIntegr float64 // byte-seconds
	liveIntegr     float64
	running        bool
}

// begin starts integrating at t with the current levels.
func (m *kvMeter) begin(t time.Time) {
	m.start, m.last, m.running = t, t, true
}

func (m *kvMeter) advance(t time.Time) {
	if m.running && t.After(m.last) {
		dt := t.Sub(m.last).Seconds()
		m.reservedIntegr += dt * float64(m.reserved)
		m.liveIntegr += dt * float64(m.live)
	}
	if t.After(m.last) {
		m.last = t
	}
}

// setReserved changes the reserved level at t.
func (m *kvMeter) setReserved(t time.Time, bytes int64) {
	m.advance(t)
	m.reserved = bytes
	m.peak = max(m.peak, bytes)
}

// setLive changes the live level at t.
func (m *kvMeter) setLive(t time.Time, bytes int64) {
	m.advance(t)
	m.live = bytes
}

// averages returns time-weighted averages up to t.
func (m *kvMeter) averages(t time.Time) (reserved, live float64) {
	m.advance(t)
	d := m.last.Sub(m.start).Seconds()
	if !m.running || d <= 0 {
		return float64(m.reserved), float64(m.live)
	}
	return m.reservedIntegr / d, m.liveIntegr / d
}
