// Command rclone is rclone as Seldon's storage initializer runs it (`rclone copy <modelUri> /mnt/models`),
// with only the backends the local cluster's tests pull from: S3 and the local disk. The whole of rclone
// links some seventy backends; these two keep the build short.
package main

import (
	_ "github.com/rclone/rclone/backend/local"
	_ "github.com/rclone/rclone/backend/s3"
	"github.com/rclone/rclone/cmd"
	_ "github.com/rclone/rclone/cmd/copy"
	_ "github.com/rclone/rclone/cmd/version"
)

func main() {
	cmd.Main()
}
