package config_test

import (
	"fmt"

	"github.com/hotkeyd/hotkeyd/config"
	"github.com/spf13/pflag"
)

func ExampleLoad() {
	// What a process would find in its environment and on its command line.
	env := map[string]string{
		"HOTKEYD_REDIS_ADDRS":   "10.0.0.1:6379,10.0.0.2:6379",
		"HOTKEYD_HOT_READ_RATE": "2000",
		"HOTKEYD_DETECTOR_TOPK": "500",
	}
	fs := pflag.NewFlagSet("hotkeyd serve", pflag.ContinueOnError)
	config.RegisterFlags(fs)
	if err := fs.Parse([]string{"--topk", "50"}); err != nil {
		fmt.Println(err)
		return
	}

	c, err := config.Load(config.LoadOptions{
		Env: func(name string) (string, bool) {
			v, ok := env[name]
			return v, ok
		},
		Flags: fs,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("http:", c.HTTP.Listen)
	fmt.Println("redis:", c.Redis.Addrs)
	fmt.Println("read rate:", c.Hot.Read.Rate)
	fmt.Println("topk:", c.Detector.TopK) // the flag beats the environment
	// Output:
	// http: 127.0.0.1:9736
	// redis: [10.0.0.1:6379 10.0.0.2:6379]
	// read rate: 2000
	// topk: 50
}

func ExampleConfig_Validate() {
	c := config.Default()
	c.Detector.Width = 1000
	c.Hot.Read.Share = 1.5
	fmt.Println(c.Validate())
	// Output:
	// detector.width: 1000 is not a power of two; use a power of two between 64 and 16777216
	// hot.read.share: 1.5 is out of range; use a fraction in (0, 1]
}
