package campaignq

import (
	"fmt"
	"path/filepath"
)

// The output folder of a queued campaign or experiment, the same for
// ovrun bench and ovtrace ab: one folder per requirement class under
// ClassesDir (the layout a local run writes, plus BlocksDir: where each
// block ran), PooledDir with --pool, and MergeJSON, the merged report.
const (
	ClassesDir = "classes"
	PooledDir  = "pooled"
	BlocksDir  = "blocks"
	MergeJSON  = "merge.json"
)

// ClassFolder is the folder of requirement class req in the output folder
// dir.
func ClassFolder(dir string, req Labels) string {
	return filepath.Join(dir, ClassesDir, ClassDir(req))
}

// BlockFile is the record of block (a pair, for bench) in a class folder.
func BlockFile(classDir string, block int) string {
	return filepath.Join(classDir, BlocksDir, fmt.Sprintf("%02d.json", block))
}
