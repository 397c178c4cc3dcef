package serve

import (
	"fmt"
)

// normalizeSlack allows for normalization that shrinks text (NFKC turns
// some 3-byte characters into 2 bytes or 1) in the byte bound below.
const normalizeSlack = 4

// fitsBytes refuses a text of n bytes that cannot fit the largest context
// whatever it encodes to, before it is rendered or encoded: every token
// covers at most MaxPieceBytes bytes of text.
func (s *Server) fitsBytes(n int) error {
	limit := int64(s.cfg.Engine.MaxContext()) * int64(s.maxPiece) * normalizeSlack
	if int64(n) > limit {
		return fmt.Errorf("prompt of %d bytes cannot fit the largest context of %d tokens (at most %d bytes)", n, s.cfg.Engine.MaxContext(), limit)
	}
	return nil
}
