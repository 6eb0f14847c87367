# One slim image for both processes: web (Daphne) by default, the worker by command:
#   docker run IMAGE                                   -> Daphne on :8000
#   docker run IMAGE python manage.py dispatch_realtime -> the dispatcher
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
    && useradd --system --uid 10001 --home-dir /app app
COPY manage.py ./
COPY project ./project
COPY messenger_realtime ./messenger_realtime
COPY templates ./templates
USER app
EXPOSE 8000
# WebSocket limits: MAX_MESSAGE_SIZE (32768) + 1 KiB; change both together (docs/hub.md).
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "--websocket-max-frame-size", "33792", \
     "--websocket-max-message-size", "33792", "project.asgi:application"]
