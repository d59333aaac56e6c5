# The release image: the static binary and a CA bundle on an empty base, so
# building it pulls nothing. `make image` stages its context under
# build/image/ (the binary built with CGO_ENABLED=0, the build machine's CA
# bundle, an empty directory) and builds this file with podman or docker.
#
# sidecar/Dockerfile builds the same image from source on a machine with
# network; examples/image_test.go checks that the two final stages agree.
FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="queenside" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/queenside/queenside"
# For a PostgreSQL reached over TLS (sslmode=verify-full): Go reads this path.
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY queenside /usr/local/bin/queenside
# scratch has no RUN: the volumes' mount points are an empty directory
# copied in, owned by the user the sidecar runs as; their parents first, so
# that COPY --chown does not create them owned by that user too.
COPY empty/ /run/
COPY empty/ /var/lib/queenside/
COPY --chown=10001:10001 empty/ /run/queenside/
COPY --chown=10001:10001 empty/ /var/lib/queenside/spool/
# Numeric: scratch has no /etc/passwd to look a name up in.
USER 10001:10001
# The socket and the spool live on volumes the pod (or compose) provides.
VOLUME ["/run/queenside", "/var/lib/queenside/spool"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/queenside"]
CMD ["serve", "--socket=/run/queenside/queenside.sock", "--spool-dir=/var/lib/queenside/spool", "--http-addr=:8080"]
