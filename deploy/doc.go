// Package deploy holds no code: it is the home of the tests that keep the
// deployment files honest. The files themselves are not Go:
//
//   - deploy/prometheus.yml: the Prometheus scrape configuration;
//   - deploy/alerts.yml: the alerting rules (deploy/alerts_test.yml are
//     their promtool unit tests);
//   - deploy/grafana/: Grafana provisioning (datasource, dashboard provider)
//     and the dashboard JSON;
//   - ../Dockerfile and ../docker-compose.yml.
//
// What the tests prove, under `make test`:
//
//   - every metric name (and every label value a selector matches on) that
//     the dashboard and the alert rules query exists in the /metrics of a
//     real `backstream serve` that bootstrapped the simulated network
//     (metrics_test.go);
//   - docker-compose.yml parses, its services, ports, named volumes and
//     mounted files exist and agree with prometheus.yml, the Grafana
//     provisioning and the CLI's BACKSTREAM_* variables; the Dockerfile is
//     multi-stage, static, non-root, on the go.mod Go version
//     (compose_test.go).
//
// Under `make test-long` (prometheus_test.go), a real Prometheus server on
// loopback, configured from deploy/prometheus.yml with alerts.yml loaded,
// scrapes a running backstream; backstream_repos is read back through its
// HTTP API and every alert rule evaluates healthy. It skips where no
// `prometheus` binary is installed.
//
// Where promtool is installed, `promtool check rules` and `promtool test
// rules deploy/alerts_test.yml` also run under `go test`
// (promtool_test.go; skipped without it).
//
// `make check-metrics` adds promtool's own checks (metrics, config, rules
// and the rule unit tests); it is not part of `make test` because it needs
// the Debian `prometheus` package.
//
// This package must not be imported: it exports nothing.
package deploy
