# An assistant served over HTTP: `docker build -t my-assistant .` then
# `docker run -p 5005:5005 -e OPENAI_API_KEY my-assistant`.
# PROJECT is the assistant folder to bake in (default: the example assistant in this folder).

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY plugin ./plugin
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[postgres,redis,metrics,tracing,a2a,actions,socketio,fast]"

FROM python:3.12-slim
ARG PROJECT=.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels \
        "subagents[postgres,redis,metrics,tracing,a2a,actions,socketio,fast]" \
    && rm -rf /wheels \
    && groupadd --gid 10001 assistant \
    && useradd --uid 10001 --gid assistant --no-create-home --shell /usr/sbin/nologin assistant
WORKDIR /app
COPY --chown=assistant:assistant ${PROJECT}/ /app/
USER assistant
EXPOSE 5005
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5005/health', timeout=4)"]
CMD ["subagents", "serve", "--project", "/app", "--host", "0.0.0.0", "--port", "5005"]
