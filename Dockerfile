# The executor's own image: the service (`executor serve`: the /v1 JSON API and MCP at /mcp) on TCP, driving the
# host's Docker engine.
#
# Built offline (`just server-image`): its base is the `toolchain` session image (bootstrapped from the host's
# apt sources, no registry needed), and every Python dependency comes from wheels prepared on the host in
# build/wheels, so the build itself runs with `--network none`.
#
# Run it with the engine socket mounted (only this container gets it; sessions never do) and bearer tokens (the
# service refuses TCP without them); EXECUTOR_SERVICE__HOST / EXECUTOR_SERVICE__PORT change where it binds:
#   docker run --rm -p 127.0.0.1:8766:8766 -v /var/run/docker.sock:/var/run/docker.sock \
#     -e EXECUTOR_SERVICE__TOKENS='["a-long-random-token"]' executor/server
ARG BASE=executor/toolchain:latest
FROM ${BASE}

USER root
WORKDIR /opt/executor
COPY build/wheels/ /tmp/wheels/
COPY pyproject.toml README.md ./
COPY executor/ ./executor/
COPY images/ ./images/
COPY policy/ ./policy/
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /tmp/wheels --no-cache-dir executor \
 && rm -rf /tmp/wheels

# Inside a container the executor cannot share host paths with the engine: the agent goes into sessions through
# a small derived image layer and is reached through an exec bridge. The agent is compiled here, once.
ENV PATH=/opt/venv/bin:$PATH \
    EXECUTOR_HOME=/var/lib/executor \
    EXECUTOR_AGENT__TRANSPORT=exec \
    EXECUTOR_AGENT__BUILD_DIR=/opt/executor/agent \
    EXECUTOR_IMAGES__IMAGES_DIR=/opt/executor/images \
    EXECUTOR_GATE__POLICY_DIR=/opt/executor/policy \
    EXECUTOR_SERVICE__TCP=true \
    EXECUTOR_SERVICE__HOST=0.0.0.0 \
    EXECUTOR_SERVICE__PORT=8766
RUN executor agent build && mkdir -p /var/lib/executor && chmod 0700 /var/lib/executor

EXPOSE 8766
ENTRYPOINT ["executor"]
CMD ["serve"]
