{{/* gRPC TLS and logon of the query services (values grpc.*, docs/security.md): the
environment (Settings.ENVIRONMENT's names), and the Secrets and the entitlements
ConfigMap mounted where that environment points. */}}
{{- define "kafka-sow.grpcEnv" -}}
{{- $g := .Values.grpc -}}
{{- if $g.tls.enabled }}
- name: SOW_GRPC_TLS_CERT
  value: /etc/kafka-sow/grpc/tls/tls.crt
- name: SOW_GRPC_TLS_KEY
  value: /etc/kafka-sow/grpc/tls/tls.key
- name: SOW_GRPC_CLIENT_CERTS
  value: {{ $g.tls.clientCerts | quote }}
{{- if eq $g.tls.clientCerts "require" }}
- name: SOW_GRPC_TLS_CLIENT_CA
  value: {{ printf "/etc/kafka-sow/grpc/client-ca/%s" $g.tls.clientCaSecret.key | quote }}
{{- end }}
{{- end }}
{{- with $g.auth.methods }}
- name: SOW_AUTH
  value: {{ join "," . | quote }}
{{- end }}
{{- if $g.auth.usersSecret.name }}
- name: SOW_USERS_FILE
  value: {{ printf "/etc/kafka-sow/auth/users/%s" $g.auth.usersSecret.key | quote }}
{{- end }}
{{- if $g.auth.jwksSecret.name }}
- name: SOW_JWKS_FILE
  value: {{ printf "/etc/kafka-sow/auth/jwks/%s" $g.auth.jwksSecret.key | quote }}
{{- else if $g.auth.jwtKeySecret.name }}
- name: SOW_JWT_KEY
  value: {{ printf "/etc/kafka-sow/auth/jwt/%s" $g.auth.jwtKeySecret.key | quote }}
{{- end }}
{{- with $g.auth.audience }}
- name: SOW_JWT_AUDIENCE
  value: {{ . | quote }}
{{- end }}
{{- with $g.auth.issuer }}
- name: SOW_JWT_ISSUER
  value: {{ . | quote }}
{{- end }}
{{- if has "token" $g.auth.methods }}
- name: SOW_JWT_ROLES_CLAIM
  value: {{ $g.auth.rolesClaim | quote }}
{{- end }}
{{- if $g.entitlements }}
- name: SOW_ENTITLEMENTS
  value: /etc/kafka-sow/entitlements/entitlements.yaml
{{- end }}
{{- end -}}

{{/* name, Secret, mount path: each gRPC security file mounted (read-only). */}}
{{- define "kafka-sow.grpcFiles" -}}
{{- $g := .Values.grpc -}}
{{- $files := list -}}
{{- if $g.tls.enabled -}}
{{- $files = append $files (list "grpc-tls" $g.tls.secret "/etc/kafka-sow/grpc/tls") -}}
{{- if eq $g.tls.clientCerts "require" -}}
{{- $files = append $files (list "grpc-client-ca" $g.tls.clientCaSecret.name "/etc/kafka-sow/grpc/client-ca") -}}
{{- end -}}
{{- end -}}
{{- if $g.auth.usersSecret.name -}}
{{- $files = append $files (list "auth-users" $g.auth.usersSecret.name "/etc/kafka-sow/auth/users") -}}
{{- end -}}
{{- if $g.auth.jwksSecret.name -}}
{{- $files = append $files (list "auth-jwks" $g.auth.jwksSecret.name "/etc/kafka-sow/auth/jwks") -}}
{{- else if $g.auth.jwtKeySecret.name -}}
{{- $files = append $files (list "auth-jwt-key" $g.auth.jwtKeySecret.name "/etc/kafka-sow/auth/jwt") -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{- define "kafka-sow.grpcMounts" -}}
{{- range $file := include "kafka-sow.grpcFiles" . | fromJsonArray }}
- name: {{ index $file 0 }}
  mountPath: {{ index $file 2 }}
  readOnly: true
{{- end }}
{{- if .Values.grpc.entitlements }}
- name: entitlements
  mountPath: /etc/kafka-sow/entitlements
  readOnly: true
{{- end }}
{{- end -}}

{{- define "kafka-sow.grpcVolumes" -}}
{{- range $file := include "kafka-sow.grpcFiles" . | fromJsonArray }}
- name: {{ index $file 0 }}
  secret:
    secretName: {{ index $file 1 }}
{{- end }}
{{- if .Values.grpc.entitlements }}
- name: entitlements
  configMap:
    name: {{ include "kafka-sow.fullname" . }}-entitlements
{{- end }}
{{- end -}}
