package sched

import _ "go.opentelemetry.io/otel/exporters/prometheus"
