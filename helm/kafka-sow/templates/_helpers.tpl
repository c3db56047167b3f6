{{/* Names and labels. */}}
{{- define "kafka-sow.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kafka-sow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafka-sow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "kafka-sow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: call with (list $ "processor"). */}}
{{- define "kafka-sow.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "kafka-sow.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "kafka-sow.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Prometheus scrape annotations (metrics.podAnnotations). */}}
{{- define "kafka-sow.scrapeAnnotations" -}}
{{- if .Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* SOW_KAFKA_PROPERTIES: librdkafka properties from kafka.tls, kafka.sasl and
kafka.properties. Secrets appear only as $(VAR) references to secretKeyRef variables,
which the kubelet expands. */}}
{{- define "kafka-sow.kafkaProperties" -}}
{{- $k := .Values.kafka -}}
{{- $props := list -}}
{{- if and $k.tls.enabled $k.sasl.enabled -}}
{{- $props = append $props "security.protocol=SASL_SSL" -}}
{{- else if $k.tls.enabled -}}
{{- $props = append $props "security.protocol=SSL" -}}
{{- else if $k.sasl.enabled -}}
{{- $props = append $props "security.protocol=SASL_PLAINTEXT" -}}
{{- end -}}
{{- if and $k.tls.enabled $k.tls.caSecret.name -}}
{{- $props = append $props (printf "ssl.ca.location=/etc/kafka-sow/tls/ca/%s" $k.tls.caSecret.key) -}}
{{- end -}}
{{- if and $k.tls.enabled $k.tls.clientCertSecret -}}
{{- $props = append $props "ssl.certificate.location=/etc/kafka-sow/tls/client/tls.crt" -}}
{{- $props = append $props "ssl.key.location=/etc/kafka-sow/tls/client/tls.key" -}}
{{- end -}}
{{- if $k.sasl.enabled -}}
{{- $props = append $props (printf "sasl.mechanism=%s" $k.sasl.mechanism) -}}
{{- $props = append $props "sasl.username=$(SOW_SASL_USERNAME)" -}}
{{- $props = append $props "sasl.password=$(SOW_SASL_PASSWORD)" -}}
{{- end -}}
{{- range $key := keys $k.properties | sortAlpha -}}
{{- $props = append $props (printf "%s=%v" $key (index $k.properties $key)) -}}
{{- end -}}
{{- join ";" $props -}}
{{- end -}}

{{/* Environment every workload gets (the names are Settings.ENVIRONMENT's). */}}
{{- define "kafka-sow.commonEnv" -}}
{{- if .Values.kafka.sasl.enabled }}
- name: SOW_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: SOW_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
- name: KAFKA_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required: the external Kafka's host:port list" .Values.kafka.bootstrapServers | quote }}
- name: SOW_TOPOLOGY
  value: /etc/kafka-sow/topology/topology.yaml
- name: SOW_STATE_DIR
  value: /var/lib/kafka-sow/state
- name: SOW_METRICS_ADDRESS
  value: {{ printf "0.0.0.0:%v" .Values.metrics.port | quote }}
- name: SOW_DEAD_LETTER_TOPIC
  value: {{ .Values.deadLetterTopic | quote }}
- name: SOW_REPLICATION_FACTOR
  value: {{ .Values.kafka.replicationFactor | quote }}
- name: SOW_MIN_INSYNC_REPLICAS
  value: {{ .Values.kafka.minInsyncReplicas | quote }}
{{- with include "kafka-sow.kafkaProperties" . }}
- name: SOW_KAFKA_PROPERTIES
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "kafka-sow.commonMounts" -}}
- name: topology
  mountPath: /etc/kafka-sow/topology
  readOnly: true
- name: state
  mountPath: /var/lib/kafka-sow/state
- name: tmp
  mountPath: /tmp
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/kafka-sow/tls/ca
  readOnly: true
{{- end }}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.clientCertSecret }}
- name: kafka-client-cert
  mountPath: /etc/kafka-sow/tls/client
  readOnly: true
{{- end }}
{{- end -}}

{{- define "kafka-sow.commonVolumes" -}}
- name: topology
  configMap:
    name: {{ include "kafka-sow.fullname" . }}-topology
- name: tmp
  emptyDir: {}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret.name }}
{{- end }}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.clientCertSecret }}
- name: kafka-client-cert
  secret:
    secretName: {{ .Values.kafka.tls.clientCertSecret }}
{{- end }}
{{- end -}}
